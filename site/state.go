package site

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxEntries bounds the number of entries the state holds, so a runaway
// client cannot grow the raft log and snapshots without limit.
const MaxEntries = 100_000

// State is the site state machine: the entries keyed by MAC, with an index
// by node and the boot path's read model of each. It is safe for
// concurrent use; Apply is called by one goroutine (raft's FSM loop), reads
// by many. Stored messages are never mutated after they are stored, so
// readers may hold on to them.
type State struct {
	mu     sync.RWMutex
	byMAC  map[string]*statev1.StoredEntry
	boot   map[string]bootentry.Entry // bootView of byMAC, same keys
	byNode map[string]map[string]struct{}
	spec   *sitev1.SiteSpec
	images map[string]*statev1.ImageWant // by string(digest)

	changed chan struct{}
	version atomic.Uint64
	log     *slog.Logger
	skipped *prometheus.CounterVec
}

// StateOption configures a State.
type StateOption func(*State)

// WithLogger makes the state machine log the commands it refuses and the
// entries it skips because they break a validation rule. Without it those
// lines are discarded; the siteboot_site_apply_skipped_total counter counts
// them either way.
func WithLogger(l *slog.Logger) StateOption {
	return func(s *State) { s.log = l }
}

// NewState returns an empty state.
func NewState(opts ...StateOption) *State {
	s := &State{
		byMAC:   make(map[string]*statev1.StoredEntry),
		boot:    make(map[string]bootentry.Entry),
		byNode:  make(map[string]map[string]struct{}),
		images:  make(map[string]*statev1.ImageWant),
		changed: make(chan struct{}, 1),
		log:     slog.New(slog.DiscardHandler),
		skipped: newSkippedCounter(),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Changed receives a value after the state changed (coalesced: one value
// may stand for several changes). Reactors such as the image cache re-read
// what they need when it fires.
func (s *State) Changed() <-chan struct{} { return s.changed }

// Version counts the changes applied so far (commands and restores). It
// only grows, so a reader that synced at version v has seen every change up
// to v.
func (s *State) Version() uint64 { return s.version.Load() }

func (s *State) signal() {
	s.version.Add(1)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// PutResult is what a PutEntries command stored.
type PutResult struct {
	Stored []*statev1.StoredEntry
}

// CleanUpResult is what a clean-up or expiry command removed.
type CleanUpResult struct {
	RemovedMACs []string
}

// ApplyCommand decodes and applies one serialized SiteCommand. It returns a
// *PutResult, a *CleanUpResult, a *SpecResult, a *statev1.ImageWant, an
// *ImageRemoved or an error; on error nothing changed.
//
// Every command is checked with the rules the API checks requests with
// (those that need no clock and no local configuration) before it changes
// anything: the log may hold entries the API never saw. A command that
// breaks a rule is refused whole, except PutEntries, whose invalid entries
// are skipped and the rest stored.
func (s *State) ApplyCommand(data []byte) any {
	cmd := &statev1.SiteCommand{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		s.refused(fmt.Errorf("undecodable: %w", err))
		return fmt.Errorf("%w: %v", ErrUnknownCommand, err)
	}
	s.mu.Lock()
	res := s.apply(cmd)
	s.mu.Unlock()
	if _, failed := res.(error); !failed {
		s.signal()
	}
	return res
}

func (s *State) apply(cmd *statev1.SiteCommand) any {
	if cmd.GetOp() == nil {
		return s.unknownOp()
	}
	if err := checkAt(cmd.GetAt()); err != nil {
		return s.refused(err)
	}
	switch op := cmd.GetOp().(type) {
	case *statev1.SiteCommand_PutEntries:
		return s.put(op.PutEntries, cmd.GetAt())
	case *statev1.SiteCommand_CleanUp:
		valid, err := ValidateCleanUp(op.CleanUp)
		if err != nil {
			return s.refused(err)
		}
		return s.cleanUp(valid)
	case *statev1.SiteCommand_ExpireEntries:
		before, err := checkExpire(op.ExpireEntries, cmd.GetAt())
		if err != nil {
			return s.refused(err)
		}
		return s.expire(before)
	case *statev1.SiteCommand_ApplySiteSpec:
		valid, err := ValidateSiteSpec(op.ApplySiteSpec.GetSpec())
		if err != nil {
			return s.refused(err)
		}
		return s.applySpec(valid)
	case *statev1.SiteCommand_AddImage:
		if err := ValidateImageWant(op.AddImage.GetWant()); err != nil {
			return s.refused(err)
		}
		return s.addImage(op.AddImage.GetWant())
	case *statev1.SiteCommand_RemoveImage:
		if err := ValidateDigest("sha256", op.RemoveImage.GetSha256()); err != nil {
			return s.refused(err)
		}
		return s.removeImage(op.RemoveImage.GetSha256())
	default:
		return s.unknownOp()
	}
}

func (s *State) unknownOp() error {
	s.refused(errors.New("no known operation"))
	return ErrUnknownCommand
}

// put stores the valid entries of p. Invalid ones are skipped (and
// logged); a MAC held by another node or the MaxEntries bound refuses the
// whole command.
func (s *State) put(p *statev1.PutEntries, at *timestamppb.Timestamp) any {
	if err := checkEntryBatch(p.GetNodeId(), len(p.GetEntries())); err != nil {
		return s.refused(err)
	}
	valid := s.validPut(p)
	added := 0
	for _, v := range valid {
		old, ok := s.byMAC[v.entry.GetMac()]
		if ok && old.GetNodeId() != p.GetNodeId() {
			return &ConflictError{Field: fmt.Sprintf("entries[%d].mac", v.index), MAC: v.entry.GetMac(), Owner: old.GetNodeId()}
		}
		if !ok {
			added++
		}
	}
	if len(s.byMAC)+added > MaxEntries {
		return &LimitError{Reason: fmt.Sprintf("the site holds %d entries; %d more would pass the limit of %d", len(s.byMAC), added, MaxEntries)}
	}
	res := &PutResult{}
	for _, v := range valid {
		e := v.entry
		se := &statev1.StoredEntry{NodeId: p.GetNodeId(), Entry: e, CreatedAt: at}
		s.byMAC[e.GetMac()] = se
		s.boot[e.GetMac()] = bootView(se)
		macs := s.byNode[p.GetNodeId()]
		if macs == nil {
			macs = make(map[string]struct{})
			s.byNode[p.GetNodeId()] = macs
		}
		macs[e.GetMac()] = struct{}{}
		res.Stored = append(res.Stored, se)
	}
	return res
}

func (s *State) cleanUp(req *sitev1.BootCleanUpRequest) any {
	var victims []string
	for mac := range s.byNode[req.GetNodeId()] {
		if len(req.GetMacs()) > 0 && !slices.Contains(req.GetMacs(), mac) {
			continue
		}
		if w := req.GetWorkflowId(); w != "" && s.byMAC[mac].GetEntry().GetWorkflowId() != w {
			continue
		}
		victims = append(victims, mac)
	}
	return s.remove(victims)
}

func (s *State) expire(before time.Time) any {
	var victims []string
	for mac, se := range s.byMAC {
		if !se.GetEntry().GetNotAfter().AsTime().After(before) {
			victims = append(victims, mac)
		}
	}
	return s.remove(victims)
}

func (s *State) remove(macs []string) *CleanUpResult {
	slices.Sort(macs)
	for _, mac := range macs {
		node := s.byMAC[mac].GetNodeId()
		delete(s.byMAC, mac)
		delete(s.boot, mac)
		delete(s.byNode[node], mac)
		if len(s.byNode[node]) == 0 {
			delete(s.byNode, node)
		}
	}
	return &CleanUpResult{RemovedMACs: macs}
}

// Lookup returns the boot path's view of the live entry for a normalised
// MAC: one whose not_after lies after now. An expired entry is never
// returned, even before the janitor purges it. It allocates nothing: the
// view was built when the entry was stored.
func (s *State) Lookup(mac string, now time.Time) (bootentry.Entry, bool) {
	s.mu.RLock()
	e, ok := s.boot[mac]
	s.mu.RUnlock()
	if !ok || !e.LiveAt(now) {
		return bootentry.Entry{}, false
	}
	return e, true
}

// List returns the stored entries, live or not, of one node (or of every
// node when nodeID is empty), ordered by node id then MAC.
func (s *State) List(nodeID string) []*statev1.StoredEntry {
	s.mu.RLock()
	out := make([]*statev1.StoredEntry, 0, len(s.byMAC))
	for _, se := range s.byMAC {
		if nodeID == "" || se.GetNodeId() == nodeID {
			out = append(out, se)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *statev1.StoredEntry) int {
		if a.GetNodeId() != b.GetNodeId() {
			return strings.Compare(a.GetNodeId(), b.GetNodeId())
		}
		return strings.Compare(a.GetEntry().GetMac(), b.GetEntry().GetMac())
	})
	return out
}

// Counts reports the number of stored entries, how many are live at now,
// and how many nodes hold at least one.
func (s *State) Counts(now time.Time) (entries, live, nodes int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, se := range s.byMAC {
		if se.GetEntry().GetNotAfter().AsTime().After(now) {
			live++
		}
	}
	return len(s.byMAC), live, len(s.byNode)
}

// HasExpired reports whether any stored entry is past not_after at now.
func (s *State) HasExpired(now time.Time) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, se := range s.byMAC {
		if !se.GetEntry().GetNotAfter().AsTime().After(now) {
			return true
		}
	}
	return false
}

// MarshalState serializes the whole state (a SiteState, entries ordered by
// MAC) for a raft snapshot.
func (s *State) MarshalState() ([]byte, error) {
	s.mu.RLock()
	st := &statev1.SiteState{Entries: make([]*statev1.StoredEntry, 0, len(s.byMAC)), Spec: s.spec, Images: s.imageList()}
	for _, se := range s.byMAC {
		st.Entries = append(st.Entries, se)
	}
	s.mu.RUnlock()
	slices.SortFunc(st.Entries, func(a, b *statev1.StoredEntry) int {
		return strings.Compare(a.GetEntry().GetMac(), b.GetEntry().GetMac())
	})
	return proto.MarshalOptions{Deterministic: true}.Marshal(st)
}

// RestoreState replaces the whole state with a serialized SiteState. An
// entry, image or spec in it that breaks a validation rule is skipped (and
// logged); data that does not decode changes nothing.
func (s *State) RestoreState(data []byte) error {
	st := &statev1.SiteState{}
	if err := proto.Unmarshal(data, st); err != nil {
		return fmt.Errorf("site: restore: %w", err)
	}
	byMAC, boot, byNode := s.restoreEntries(st.GetEntries())
	images := s.restoreImages(st.GetImages())
	spec := s.restoreSpec(st.GetSpec())
	s.mu.Lock()
	s.byMAC, s.boot, s.byNode, s.spec, s.images = byMAC, boot, byNode, spec, images
	s.mu.Unlock()
	s.signal()
	return nil
}

// byMACOwner returns the node that holds mac, live or not.
func (s *State) byMACOwner(mac string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	se, ok := s.byMAC[mac]
	return se.GetNodeId(), ok
}
