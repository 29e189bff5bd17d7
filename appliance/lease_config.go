package appliance

import (
	"errors"
	"fmt"
	"time"

	"github.com/siteboot/siteboot/lease"
)

// minClusterTTL is the shortest lease.ttl of cluster mode: raft's network
// timing (1 s heartbeats and elections) must fit inside it.
const minClusterTTL = 2 * time.Second

// keyError is a bad value of one config key.
type keyError struct{ key, reason string }

func (e *keyError) Error() string { return e.key + ": " + e.reason }

// checkLease checks lease.*: the mode, what each mode needs and refuses,
// and the raft transport. Errors are *keyError or *lease.TransportError.
func (c *Config) checkLease() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &keyError{key: key, reason: fmt.Sprintf(format, args...)})
	}
	l := c.Lease
	if time.Duration(l.TTL) < lease.MinTTL {
		bad("lease.ttl", "%s: must be at least %s (the holder renews every ttl/3)", time.Duration(l.TTL), lease.MinTTL)
	}
	if l.Margin < 0 {
		bad("lease.margin", "must not be negative")
	}
	switch lease.Mode(l.Mode) {
	case lease.Standalone, lease.External:
		if len(l.Raft.Join) > 0 {
			bad("lease.raft.join", "lists other voters, but lease.mode %s runs a single voter; set lease.mode: cluster, or remove lease.raft.join", l.Mode)
		}
		if l.Raft.Advertise != "" {
			bad("lease.raft.advertise", "is for lease.mode cluster only")
		}
	case lease.Cluster:
		if l.Raft.Bind == "" {
			bad("lease.raft.bind", "is required with lease.mode cluster: the voters dial each other there")
		}
		if l.TTL > 0 && time.Duration(l.TTL) < minClusterTTL {
			bad("lease.ttl", "%s: lease.mode cluster needs at least %s (raft's heartbeats and elections take about 1s)", time.Duration(l.TTL), minClusterTTL)
		}
		adv := l.Raft.Advertise
		if adv == "" {
			adv = l.Raft.Bind
		}
		if adv != "" {
			if _, err := lease.CheckVoters(adv, l.Raft.Join); err != nil {
				if te, ok := errors.AsType[*lease.TransportError](err); ok && te.Field == "advertise" && l.Raft.Advertise == "" {
					err = &lease.TransportError{Field: "bind", Reason: te.Reason}
				}
				errs = append(errs, err)
			}
		}
	default:
		bad("lease.mode", "%q: want standalone, cluster or external", l.Mode)
	}
	if err := lease.CheckTransport(l.Raft.Bind, c.raftTLS()); err != nil {
		errs = append(errs, err)
	}
	return errs
}
