package site

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Applier commits a serialized SiteCommand to the replicated log and
// returns what the state machine's ApplyCommand returned for it.
type Applier interface {
	ApplySite(ctx context.Context, cmd []byte) (any, error)
}

// ImageChecker says whether the image cache holds a digest verified.
type ImageChecker interface {
	Ready(digest [32]byte) bool
}

// StoreConfig configures a Store.
type StoreConfig struct {
	State   *State
	Applier Applier
	Now     func() time.Time
	Limits  Limits
	Logger  *slog.Logger
	// Images, when set, must hold an entry's sanboot_sha256 verified before
	// the entry is accepted. Without it every sanboot entry is refused.
	Images ImageChecker
}

// Store is the write and read side of the site state used by the admin API.
type Store struct {
	state   *State
	applier Applier
	now     func() time.Time
	limits  Limits
	log     *slog.Logger
	images  ImageChecker
}

// NewStore returns a Store that writes through cfg.Applier and reads
// cfg.State.
func NewStore(cfg StoreConfig) *Store {
	return &Store{state: cfg.State, applier: cfg.Applier, now: cfg.Now, limits: cfg.Limits, log: cfg.Logger, images: cfg.Images}
}

// State returns the local state the store reads from.
func (s *Store) State() *State { return s.state }

// PrepareRamdisk validates and stores one node's entries (boot.prepareRamdisk).
// An entry replaces the node's existing entry for the same MAC. Nothing is
// stored unless every entry is valid and no MAC belongs to another node.
func (s *Store) PrepareRamdisk(ctx context.Context, nodeID string, entries []*sitev1.ProxyDhcpEntry) ([]*statev1.StoredEntry, error) {
	now := s.now()
	valid, err := ValidateEntries(nodeID, entries, now, s.limits)
	if err != nil {
		return nil, err
	}
	for i, e := range valid {
		if old, ok := s.state.byMACOwner(e.GetMac()); ok && old != nodeID {
			return nil, &ConflictError{Field: fmt.Sprintf("entries[%d].mac", i), MAC: e.GetMac(), Owner: old}
		}
		if d := e.GetSanbootSha256(); d != nil && (s.images == nil || !s.images.Ready([32]byte(d))) {
			return nil, &NotReadyError{Field: fmt.Sprintf("entries[%d].sanboot_sha256", i), Digest: hex.EncodeToString(d)}
		}
	}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: timestamppb.New(now),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: nodeID, Entries: valid}},
	})
	if err != nil {
		return nil, err
	}
	put := res.(*PutResult)
	for _, se := range put.Stored {
		s.log.Info("entry stored", "node", nodeID, "mac", se.GetEntry().GetMac(),
			"workflow", se.GetEntry().GetWorkflowId(), "not_after", se.GetEntry().GetNotAfter().AsTime().Format(time.RFC3339))
	}
	return put.Stored, nil
}

// CleanUp drops a node's entries (boot.cleanUp) and returns the MACs removed.
func (s *Store) CleanUp(ctx context.Context, req *sitev1.BootCleanUpRequest) ([]string, error) {
	valid, err := ValidateCleanUp(req)
	if err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: timestamppb.New(s.now()),
		Op: &statev1.SiteCommand_CleanUp{CleanUp: valid},
	})
	if err != nil {
		return nil, err
	}
	removed := res.(*CleanUpResult).RemovedMACs
	s.log.Info("entries cleaned up", "node", valid.GetNodeId(), "workflow", valid.GetWorkflowId(), "removed", removed)
	return removed, nil
}

// Expire purges every entry past not_after and returns the MACs removed.
func (s *Store) Expire(ctx context.Context) ([]string, error) {
	now := s.now()
	if !s.state.HasExpired(now) {
		return nil, nil
	}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: timestamppb.New(now),
		Op: &statev1.SiteCommand_ExpireEntries{ExpireEntries: &statev1.ExpireEntries{Before: timestamppb.New(now)}},
	})
	if err != nil {
		return nil, err
	}
	removed := res.(*CleanUpResult).RemovedMACs
	if len(removed) > 0 {
		s.log.Info("expired entries purged", "removed", removed)
	}
	return removed, nil
}

func (s *Store) apply(ctx context.Context, cmd *statev1.SiteCommand) (any, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("site: encode command: %w", err)
	}
	res, err := s.applier.ApplySite(ctx, data)
	if err != nil {
		return nil, err
	}
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// RunJanitor purges expired entries every interval until ctx ends. Only the
// raft leader can write; elsewhere the attempt is skipped quietly.
func (s *Store) RunJanitor(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Expire(ctx); err != nil {
				s.log.Debug("expiry skipped", "err", err)
			}
		}
	}
}
