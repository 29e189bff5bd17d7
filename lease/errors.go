package lease

import "errors"

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
