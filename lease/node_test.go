package lease

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/site"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// raft's bolt store and transports keep no goroutines after Close;
		// glog-style flushers of dependencies are not ours.
		goleak.IgnoreTopFunction("github.com/hashicorp/go-metrics.(*InmemSink).run"),
		goleak.IgnoreTopFunction("github.com/armon/go-metrics.(*InmemSink).run"),
	)
}

type harness struct {
	t     *testing.T
	dir   string
	node  *Node
	state *site.State
	store *site.Store
	stop  context.CancelFunc
	done  chan error
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start opens a node on dir and waits until it holds the lease.
func start(t *testing.T, dir string) *harness {
	t.Helper()
	return startConfig(t, Config{Dir: dir})
}

// startConfig opens a node with cfg (ID, StateMachine and Logger filled
// when empty) and waits until it holds the lease.
func startConfig(t *testing.T, cfg Config) *harness {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "appliance-1"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	st, _ := cfg.StateMachine.(*site.State)
	if st == nil {
		st = site.NewState()
		cfg.StateMachine = st
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, cfg.Dir, n, st)
}

// run runs n's lease loop and waits until it holds the lease.
func run(t *testing.T, dir string, n *Node, st *site.State) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, dir: dir, node: n, state: st, stop: cancel, done: make(chan error, 1)}
	go func() { h.done <- n.Run(ctx) }()
	select {
	case <-n.Ready():
	case <-time.After(10 * time.Second):
		h.close()
		t.Fatal("node never took the lease")
	}
	h.store = site.NewStore(site.StoreConfig{State: st, Applier: n, Now: time.Now, Limits: site.Limits{DefaultTTL: time.Hour}, Logger: quietLog()})
	return h
}

func (h *harness) close() {
	h.stop()
	if err := <-h.done; err != nil {
		h.t.Errorf("Run: %v", err)
	}
	if err := h.node.Close(); err != nil {
		h.t.Errorf("Close: %v", err)
	}
}

func (h *harness) put(node string, macs ...string) {
	h.t.Helper()
	var entries []*sitev1.ProxyDhcpEntry
	for _, m := range macs {
		entries = append(entries, &sitev1.ProxyDhcpEntry{Mac: m})
	}
	if _, err := h.store.PrepareRamdisk(context.Background(), node, entries); err != nil {
		h.t.Fatal(err)
	}
}

func listed(st *site.State) []string {
	var out []string
	for _, e := range st.List("") {
		out = append(out, e.GetNodeId()+"/"+e.GetEntry().GetMac())
	}
	return out
}

func TestStandaloneLeaseAndRestart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	epoch, open := h.node.Gate()
	if !open || epoch != 1 {
		t.Fatalf("first start: Gate() = %d, %t; want 1, true", epoch, open)
	}
	ls := h.node.LeaseState()
	if !ls.GetActive() || ls.GetEpoch() != 1 || ls.GetTtlMs() != 10000 {
		t.Fatalf("LeaseState = %v", ls)
	}
	h.put("n1", "52:54:00:00:00:01", "52:54:00:00:00:02")
	h.close()
	if _, open := h.node.Gate(); open {
		t.Fatal("gate open after Close")
	}

	h2 := start(t, dir)
	defer h2.close()
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:02"}, listed(h2.state)); diff != "" {
		t.Fatalf("entries after restart (-want +got):\n%s", diff)
	}
	if epoch, open := h2.node.Gate(); !open || epoch != 2 {
		t.Fatalf("second start: Gate() = %d, %t; want 2, true (an epoch per start)", epoch, open)
	}
}

func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	h.put("n1", "52:54:00:00:00:01")
	h.put("n2", "52:54:00:00:00:02")
	if err := h.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// Written after the snapshot: must come back from the log on top of it.
	h.put("n3", "52:54:00:00:00:03")
	if _, err := h.store.CleanUp(context.Background(), &sitev1.BootCleanUpRequest{NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	h.close()

	snaps, err := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshot files = %v, %v; want one", snaps, err)
	}

	h2 := start(t, dir)
	if diff := cmp.Diff([]string{"n2/52:54:00:00:00:02", "n3/52:54:00:00:00:03"}, listed(h2.state)); diff != "" {
		t.Fatalf("state after restore (-want +got):\n%s", diff)
	}
	if epoch, _ := h2.node.Gate(); epoch != 2 {
		t.Fatalf("epoch after restore = %d, want 2 (epoch 1 came back from the snapshot)", epoch)
	}
	h2.close()

	// A restore from the snapshot alone (log gone behind it) gives the
	// snapshot's state: compact by snapshotting again, then check the
	// snapshot holds everything.
	h3 := start(t, dir)
	if err := h3.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	h3.close()
	fresh := site.NewState()
	f := newFSM(fresh, quietLog(), newSkippedCounter())
	latest := latestSnapshot(t, dir)
	rc, err := os.Open(latest)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n2/52:54:00:00:00:02", "n3/52:54:00:00:00:03"}, listed(fresh)); diff != "" {
		t.Fatalf("snapshot content (-want +got):\n%s", diff)
	}
	if e, holder := f.current(); e != 3 || holder != "appliance-1" {
		t.Fatalf("snapshot lease = %d %q; want 3 appliance-1", e, holder)
	}
}

func latestSnapshot(t *testing.T, dir string) string {
	t.Helper()
	snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot")
	}
	latest := snaps[0]
	for _, s := range snaps {
		if s > latest {
			latest = s
		}
	}
	return latest
}

func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	defer h.close()
	_, err := Open(Config{Dir: dir, ID: "appliance-1", StateMachine: site.NewState(), Logger: quietLog()})
	if err == nil || !strings.Contains(err.Error(), "another siteboot uses this data dir") {
		t.Fatalf("second Open = %v; want a locked-data-dir error", err)
	}
}

func TestRestoreRefusesGarbage(t *testing.T) {
	f := newFSM(site.NewState(), quietLog(), newSkippedCounter())
	if err := f.Restore(io.NopCloser(&oneByte{})); err == nil {
		t.Fatal("Restore of garbage succeeded")
	}
}

type oneByte struct{ done bool }

func (o *oneByte) Read(p []byte) (int, error) {
	if o.done {
		return 0, io.EOF
	}
	o.done = true
	p[0] = 0xff
	return 1, nil
}
