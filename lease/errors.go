package lease

import (
	"errors"
	"fmt"
)

// NotLeaderError is a write sent to a node that is not the raft leader.
type NotLeaderError struct {
	// Leader is the current leader's server id, empty when unknown.
	Leader string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "lease: this appliance is not the raft leader and no leader is known"
	}
	return "lease: this appliance is not the raft leader; the leader is " + e.Leader
}

// Errors callers branch on.
var (
	ErrShutdown = errors.New("lease: raft is shut down")
	ErrBusy     = errors.New("raft log is busy, try again")
)

// ErrOutcomeUnknown is a write whose fate this node cannot tell: it was
// handed to raft (or to the leader) and may be committed, but no answer
// confirmed it (leadership was lost, the leader's answer never came).
// Sending it again may apply it twice; read the state first.
var ErrOutcomeUnknown = errors.New("lease: the write may have been committed; read the state before trying it again")

// ErrNotExternal is UpdateLease on a node whose lease does not come from a
// control plane (mode standalone or cluster).
var ErrNotExternal = errors.New("lease: the boot lease is not pushed here: lease.mode is not external")

// EpochError is a pushed epoch lower than the highest one ever seen; it is
// refused so that an old control plane (or a replayed push) cannot take
// the lease back.
type EpochError struct {
	Got, Highest uint64
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("lease: epoch %d is below %d, the highest epoch pushed so far; epochs never go back", e.Got, e.Highest)
}

// UpdateError is a pushed BootLeaseState that is not a lease: Field names
// the bad field (ttl_ms, epoch).
type UpdateError struct {
	Field, Reason string
}

func (e *UpdateError) Error() string { return "lease: " + e.Field + ": " + e.Reason }
