package lease

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// StateMachine is the application state the log's site commands are applied
// to. ApplyCommand must be deterministic and must leave the state unchanged
// when it returns an error.
type StateMachine interface {
	ApplyCommand(cmd []byte) any
	MarshalState() ([]byte, error)
	RestoreState(data []byte) error
}

// maxSnapshot bounds what Restore reads, so a corrupt snapshot cannot
// exhaust memory.
const maxSnapshot = 1 << 30

// epochResult is what applying a LeaseEpoch returns.
type epochResult struct {
	epoch  uint64
	holder string
}

// fsm is the raft.FSM: the lease epoch plus the application state.
type fsm struct {
	app     StateMachine
	log     *slog.Logger
	skipped prometheus.Counter // log entries skipped as invalid
	applied atomic.Uint64
	results results    // the last results by index, for forwarded writes
	keys    memberKeys // the published member keys

	mu       sync.Mutex
	epoch    uint64
	holder   string
	external uint64 // the highest epoch a control plane pushed (external mode)
}

var _ raft.FSM = (*fsm)(nil)

func newFSM(app StateMachine, log *slog.Logger, skipped prometheus.Counter) *fsm {
	return &fsm{app: app, log: log, skipped: skipped}
}

// Apply applies one committed log entry. An entry that does not decode, or
// an epoch that breaks the rules (see applyEpoch), changes nothing and is
// logged; site commands are checked by the StateMachine itself.
func (f *fsm) Apply(l *raft.Log) any {
	res := f.applyLog(l)
	f.results.put(l.Index, res)
	f.applied.Store(l.Index)
	return res
}

func (f *fsm) applyLog(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var e statev1.LogEntry
	if err := proto.Unmarshal(l.Data, &e); err != nil {
		return f.skip(l.Index, fmt.Errorf("lease: undecodable log entry %d: %w", l.Index, err))
	}
	switch k := e.GetKind().(type) {
	case *statev1.LogEntry_LeaseEpoch:
		return f.applyEpoch(l.Index, k.LeaseEpoch)
	case *statev1.LogEntry_SiteCommand:
		return f.app.ApplyCommand(k.SiteCommand)
	case *statev1.LogEntry_MemberKey:
		return f.applyMemberKey(l.Index, k.MemberKey)
	case *statev1.LogEntry_ExternalEpoch:
		return f.applyExternal(l.Index, k.ExternalEpoch)
	default:
		return f.skip(l.Index, fmt.Errorf("lease: log entry %d of unknown kind", l.Index))
	}
}

// applyEpoch takes a new lease epoch. A holder proposes the epoch after the
// newest applied (after a Barrier), so an epoch is exactly one more than the
// current one: an older one is a stale proposal, ignored; a jump ahead
// (which could exhaust the counter) or a holder that is no server id is
// skipped.
func (f *fsm) applyEpoch(index uint64, e *statev1.LeaseEpoch) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := epochResult{epoch: f.epoch, holder: f.holder}
	switch {
	case e.GetEpoch() <= f.epoch:
		return cur
	case e.GetEpoch() != f.epoch+1:
		f.skip(index, fmt.Errorf("lease: epoch %d skipped: the next epoch is %d", e.GetEpoch(), f.epoch+1))
		return cur
	}
	if err := checkHolder(e.GetHolder()); err != nil {
		f.skip(index, fmt.Errorf("lease: epoch %d skipped: %w", e.GetEpoch(), err))
		return cur
	}
	f.epoch, f.holder = e.GetEpoch(), e.GetHolder()
	return epochResult{epoch: f.epoch, holder: f.holder}
}

// checkHolder accepts a raft server id as this package writes them: 1 to
// 128 printable ASCII characters without spaces.
func checkHolder(h string) error {
	if h == "" || len(h) > 128 {
		return fmt.Errorf("holder is %d bytes; a server id has 1 to 128", len(h))
	}
	for i := range len(h) {
		if h[i] <= ' ' || h[i] > '~' {
			return fmt.Errorf("holder %q has byte %#x; a server id is printable ASCII without spaces", h, h[i])
		}
	}
	return nil
}

// skip logs and counts a log entry that changes nothing, and returns err
// as its result.
func (f *fsm) skip(index uint64, err error) error {
	f.skipped.Inc()
	f.log.Warn("lease: log entry skipped", "index", index, "err", err)
	return err
}

func (f *fsm) current() (uint64, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch, f.holder
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	app, err := f.app.MarshalState()
	if err != nil {
		return nil, fmt.Errorf("lease: snapshot: %w", err)
	}
	epoch, holder := f.current()
	data, err := proto.Marshal(&statev1.Snapshot{LeaseEpoch: epoch, LeaseHolder: holder, SiteState: app,
		MemberKeys: f.keys.snapshot(), ExternalEpoch: f.externalEpoch()})
	if err != nil {
		return nil, fmt.Errorf("lease: snapshot: %w", err)
	}
	return snapshot(data), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSnapshot+1))
	if err != nil {
		return fmt.Errorf("lease: restore: %w", err)
	}
	if len(data) > maxSnapshot {
		return fmt.Errorf("lease: restore: snapshot larger than %d bytes", maxSnapshot)
	}
	var s statev1.Snapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("lease: restore: %w", err)
	}
	holder := s.GetLeaseHolder()
	if err := checkHolder(holder); err != nil && holder != "" {
		f.skip(0, fmt.Errorf("lease: restore: %w; the epoch is kept, without a holder", err))
		holder = ""
	}
	if ext := f.externalEpoch(); s.GetExternalEpoch() < ext {
		return fmt.Errorf("lease: restore: the snapshot's external epoch %d is below %d, already applied: external epochs never go back", s.GetExternalEpoch(), ext)
	}
	keys := restoreKeys(s.GetMemberKeys(), func(err error) { f.skip(0, err) })
	if err := f.app.RestoreState(s.GetSiteState()); err != nil {
		return err
	}
	f.keys.replace(keys)
	f.mu.Lock()
	f.epoch, f.holder, f.external = s.GetLeaseEpoch(), holder, s.GetExternalEpoch()
	f.mu.Unlock()
	return nil
}

// snapshot is an immutable serialized state.
type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("lease: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}
