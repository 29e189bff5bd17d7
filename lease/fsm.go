package lease

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
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
	applied atomic.Uint64

	mu     sync.Mutex
	epoch  uint64
	holder string
}

var _ raft.FSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) any {
	defer f.applied.Store(l.Index)
	if l.Type != raft.LogCommand {
		return nil
	}
	var e statev1.LogEntry
	if err := proto.Unmarshal(l.Data, &e); err != nil {
		return fmt.Errorf("lease: undecodable log entry %d: %w", l.Index, err)
	}
	switch k := e.GetKind().(type) {
	case *statev1.LogEntry_LeaseEpoch:
		f.mu.Lock()
		defer f.mu.Unlock()
		if k.LeaseEpoch.GetEpoch() > f.epoch {
			f.epoch, f.holder = k.LeaseEpoch.GetEpoch(), k.LeaseEpoch.GetHolder()
		}
		return epochResult{epoch: f.epoch, holder: f.holder}
	case *statev1.LogEntry_SiteCommand:
		return f.app.ApplyCommand(k.SiteCommand)
	default:
		return fmt.Errorf("lease: log entry %d of unknown kind", l.Index)
	}
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
	data, err := proto.Marshal(&statev1.Snapshot{LeaseEpoch: epoch, LeaseHolder: holder, SiteState: app})
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
	if err := f.app.RestoreState(s.GetSiteState()); err != nil {
		return err
	}
	f.mu.Lock()
	f.epoch, f.holder = s.GetLeaseEpoch(), s.GetLeaseHolder()
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
