package lease

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/site"
)

// TestTwoVotersOverTLS runs a real two-voter raft (bolt stores in temp
// dirs) over the TLS stream layer on loopback: entries committed by either
// leader reach the other node, in both directions of the transport.
func TestTwoVotersOverTLS(t *testing.T) {
	ca := newTestCA(t, "site ca")
	fast := func(id string) Config {
		return Config{Dir: t.TempDir(), ID: id, Bind: "127.0.0.1:0", TLS: ca.files(t, id, leafOpts{}),
			HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond}
	}
	h1 := startConfig(t, fast("appliance-1"))
	defer h1.close()

	cfg2 := fast("appliance-2")
	st2 := site.NewState()
	cfg2.StateMachine, cfg2.Logger = st2, quietLog()
	n2, err := open(cfg2, false) // waits to be added, as a joining appliance does
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.node.raft.AddVoter("appliance-2", n2.trans.LocalAddr(), 0, 10*time.Second).Error(); err != nil {
		_ = n2.Close()
		t.Fatalf("AddVoter over TLS: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n2.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		if err := n2.Close(); err != nil {
			t.Errorf("Close node 2: %v", err)
		}
	}()

	h1.put("n1", "52:54:00:00:00:01")
	waitFor(t, func() bool { return len(listed(st2)) == 1 })

	// Node 2 takes over: it asks node 1 for its vote and then replicates to
	// it, dialing node 1's TLS port.
	if err := h1.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	select {
	case <-n2.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("node 2 never took the lease")
	}
	if _, open := h1.node.Gate(); open {
		t.Fatal("node 1's gate is open after it handed leadership over")
	}
	s2 := site.NewStore(site.StoreConfig{State: st2, Applier: n2, Now: time.Now, Limits: site.Limits{DefaultTTL: time.Hour}, Logger: quietLog()})
	if _, err := s2.PrepareRamdisk(context.Background(), "n2", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:02"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"n1/52:54:00:00:00:01", "n2/52:54:00:00:00:02"}
	waitFor(t, func() bool { return len(listed(h1.state)) == 2 })
	if diff := cmp.Diff(want, listed(h1.state)); diff != "" {
		t.Fatalf("node 1's state (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, listed(st2)); diff != "" {
		t.Fatalf("node 2's state (-want +got):\n%s", diff)
	}
	if h1.node.raft.State() != raft.Follower {
		t.Fatalf("node 1 is %s; want Follower", h1.node.raft.State())
	}
	for _, n := range []*Node{h1.node, n2} {
		for _, r := range refusalReasons {
			if got := refusedCount(n, r); got != 0 {
				t.Errorf("%s refused %v peers for %s; want none", n.cfg.ID, got, r)
			}
		}
	}
}
