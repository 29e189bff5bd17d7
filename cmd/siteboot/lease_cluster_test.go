package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/appliance"
)

// Three appliances started with each other's raft addresses (and no other
// command) form one cluster: one holds the lease, the followers are ready
// and name the leader, a write through the leader lands on every member,
// and when the holder stops another takes over with a higher epoch.
func TestLeaseClusterOfThreeAppliances(t *testing.T) {
	var addrs []string
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	apps := make([]*testAppliance, 3)
	stopped := make([]bool, 3)
	for i := range apps {
		cfg := leaseTestConfig(t)
		cfg.NodeID = fmt.Sprintf("appliance-%d", i+1)
		cfg.Lease.Mode, cfg.Lease.TTL, cfg.Lease.Margin = "cluster", appliance.Duration(2*time.Second), appliance.Duration(200*time.Millisecond)
		cfg.Lease.Raft.Bind = addrs[i]
		for j, a := range addrs {
			if j != i {
				cfg.Lease.Raft.Join = append(cfg.Lease.Raft.Join, a)
			}
		}
		if err := cfg.Finish(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		apps[i] = &testAppliance{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", cfg.NodeID)
		}
		go func() { apps[i].done <- serve(ctx, cfg, log) }()
		t.Cleanup(func() { // before its data dir is removed
			if !stopped[i] {
				apps[i].stop()
			}
		})
	}
	holder := waitHolder(t, apps, -1)
	for i, a := range apps {
		if i == holder {
			continue
		}
		got := leaseStatusJSON(t, a.cfg.Admin.Socket)
		if got.Active || got.Mode != "cluster" || !strings.Contains(got.FencedReason, "not the raft leader") ||
			!strings.Contains(got.FencedReason, apps[holder].cfg.Lease.Raft.Bind) {
			t.Fatalf("follower %d: %+v; want fenced, naming the leader %s", i, got, apps[holder].cfg.Lease.Raft.Bind)
		}
	}
	mustCLI(t, apps[holder].cfg.Admin.Socket, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:01")
	for i, a := range apps {
		deadline := time.Now().Add(10 * time.Second)
		for len(listJSON(t, a.cfg.Admin.Socket).Entries) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("appliance %d never saw the entry written through the leader", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	epoch := leaseStatusJSON(t, apps[holder].cfg.Admin.Socket).Epoch

	apps[holder].stop()
	stopped[holder] = true
	next := waitHolder(t, apps, holder)
	// protojson writes a uint64 as a string: compare numbers, not text
	// ("10" < "9").
	got := leaseStatusJSON(t, apps[next].cfg.Admin.Socket)
	before, err1 := strconv.ParseUint(epoch, 10, 64)
	after, err2 := strconv.ParseUint(got.Epoch, 10, 64)
	if err1 != nil || err2 != nil || after <= before || got.Holder != apps[next].cfg.NodeID {
		t.Fatalf("new holder: %+v; want an epoch above %s held by %s", got, epoch, apps[next].cfg.NodeID)
	}
}

// waitHolder waits until exactly one appliance but skip holds the lease and
// returns it.
func waitHolder(t *testing.T, apps []*testAppliance, skip int) int {
	t.Helper()
	return waitHolderWithin(t, apps, skip, 20*time.Second)
}

// waitHolderWithin is waitHolder waiting up to d.
func waitHolderWithin(t *testing.T, apps []*testAppliance, skip int, d time.Duration) int {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var active []int
		for i, a := range apps {
			if i == skip {
				continue
			}
			if st, err := getStatus(a.cfg.Admin.Socket); err == nil && st.GetReady() && st.GetLease().GetActive() {
				active = append(active, i)
			}
		}
		if len(active) > 1 {
			t.Fatalf("appliances %v hold the lease at once", active)
		}
		if len(active) == 1 {
			return active[0]
		}
	}
	t.Fatalf("no appliance took the lease within %v", d)
	return -1
}
