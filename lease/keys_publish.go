package lease

import (
	"bytes"
	"context"
	"time"

	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// How often the publisher looks at the log's copy of this node's key:
// while no leader is known, once it is published, and at most between two
// failed attempts.
const (
	keyWaitLeader = 250 * time.Millisecond
	keyRecheck    = 5 * time.Second
	keyMaxBackoff = 30 * time.Second
)

// startPublishing runs publishKeys until ctx ends; the returned func waits
// for it to return.
func (n *Node) startPublishing(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.publishKeys(ctx)
	}()
	return func() { <-done }
}

// publishKeys writes this node's member key (node id, raft address, public
// key) through the log once a leader is known, and again whenever the
// log's copy differs. A follower's write is forwarded.
func (n *Node) publishKeys(ctx context.Context) {
	if len(n.cfg.PublicKey) == 0 {
		return
	}
	want, err := checkMemberKey(&statev1.MemberKey{NodeId: n.cfg.ID, Address: n.memberAddress(), PublicKey: n.cfg.PublicKey})
	if err != nil {
		n.log.Warn("lease: this appliance's key cannot be published", "err", err)
		return
	}
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_MemberKey{MemberKey: want.proto()}})
	if err != nil {
		return
	}
	backoff, lastErr := time.Second, ""
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := keyRecheck
		switch leader, _ := n.raft.LeaderWithID(); {
		case n.published(want):
			backoff, lastErr = time.Second, ""
		case leader == "":
			next = keyWaitLeader
		default:
			if err := n.publishOnce(ctx, data); err != nil {
				if ctx.Err() != nil {
					return
				}
				if err.Error() != lastErr {
					n.log.Warn("lease: publishing this appliance's key failed; retrying", "err", err, "retry_in", backoff)
				}
				lastErr, next, backoff = err.Error(), backoff, min(2*backoff, keyMaxBackoff)
				break
			}
			n.log.Info("lease: this appliance's key is published", "kid", want.KID, "address", want.Address)
		}
		t.Reset(next)
	}
}

func (n *Node) publishOnce(ctx context.Context, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	res, err := n.write(ctx, data)
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

// published reports whether the log holds want as this node's key.
func (n *Node) published(want memberKey) bool {
	got, ok := n.fsm.keys.get(want.NodeID)
	return ok && got.Address == want.Address && bytes.Equal(got.der, want.der)
}

// memberAddress is the raft address published with the key: empty for an
// in-memory transport, which nobody dials.
func (n *Node) memberAddress() string {
	if n.cfg.Bind == "" {
		return ""
	}
	return string(n.trans.LocalAddr())
}
