package lease

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/site"
)

// stall stands for a holder whose renewals cannot run: a paused process,
// a disk that blocks, a goroutine that starves. Once armed, the next
// leadership check blocks until release.
type stall struct {
	armed   atomic.Bool
	entered chan struct{} // closed when a check blocked
	release chan struct{}
	once    atomic.Bool
}

// stallable makes n's renewals stallable; call it before Run.
func stallable(n *Node) *stall {
	s := &stall{entered: make(chan struct{}), release: make(chan struct{})}
	real := n.verify
	n.verify = func() error {
		if s.armed.Load() {
			if s.once.CompareAndSwap(false, true) {
				close(s.entered)
			}
			<-s.release
		}
		return real()
	}
	return s
}

// block arms the stall and waits until a renewal is stuck in it.
func (s *stall) block(t *testing.T) {
	t.Helper()
	s.armed.Store(true)
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal reached the stalled check")
	}
}

func (s *stall) unblock() {
	if s.armed.CompareAndSwap(true, false) {
		close(s.release)
	}
}

// openStandalone opens a standalone node with ttl and a registry, its
// renewals stallable, and runs it until it holds the lease.
func openStandalone(t *testing.T, ttl time.Duration) (*harness, *stall, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	st := site.NewState()
	n, err := Open(Config{Dir: t.TempDir(), ID: "appliance-1", TTL: ttl, StateMachine: st, Logger: quietLog(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := stallable(n)
	return run(t, t.TempDir(), n, st), s, reg
}

// metricValue is the value of the counter or gauge name (with label value
// reason for a labelled one; "" for none) in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if reason == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == reason) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{reason=%q}", name, reason)
	return 0
}

func fenceEvents(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return metricValue(t, reg, "siteboot_lease_fence_events_total", reason)
}

// The gate closes when the clock passes valid_until with nothing running
// that could close it: the renewal is stuck and the watchdog is stopped.
// A process resumed after a pause finds its window gone on its first
// check. The renewal that finally runs counts the lapse and reopens.
func TestGateClosesAtValidUntilWithNothingRunning(t *testing.T) {
	h, s, reg := openStandalone(t, 300*time.Millisecond)
	defer h.close()
	defer s.unblock()
	if e, open := h.node.Gate(); !open || e != 1 {
		t.Fatalf("Gate() = %d, %t; want 1, true", e, open)
	}
	s.block(t)
	h.node.mu.Lock()
	h.node.watchdog.Stop()
	until := h.node.win.until
	h.node.mu.Unlock()

	var lastOpen time.Time
	for {
		before := time.Now()
		_, open := h.node.Gate()
		after := time.Now()
		if open {
			if !before.Before(until) {
				t.Fatalf("gate open at %v, past valid_until %v", before, until)
			}
			lastOpen = before
			time.Sleep(time.Millisecond)
			continue
		}
		if after.Before(until) {
			t.Fatalf("gate closed at %v, before valid_until %v", after, until)
		}
		break
	}
	if lastOpen.IsZero() {
		t.Fatal("the gate was never seen open while stalled")
	}
	if got := h.node.raft.State(); got != raft.Leader {
		t.Fatalf("raft is %s; the test needs it to still lead, so that only the clock closed the gate", got)
	}
	st := h.node.Status()
	if st.Active || st.FenceEvents != 0 || !strings.Contains(st.FencedReason, "without a renewal") {
		t.Fatalf("Status while stalled = %+v; want inactive, no fence event counted yet (nothing ran), a reason", st)
	}
	if !st.ValidUntil.Equal(until.Round(0)) {
		t.Fatalf("Status.ValidUntil = %v; want %v", st.ValidUntil, until.Round(0))
	}
	if got := metricValue(t, reg, "siteboot_lease_active", ""); got != 0 {
		t.Fatalf("siteboot_lease_active = %v while fenced", got)
	}

	s.unblock() // resumed: the renewal runs, counts the lapse and reopens
	waitFor(t, func() bool { _, open := h.node.Gate(); return open })
	if got := h.node.Status().FenceEvents; got != 1 {
		t.Fatalf("FenceEvents = %d after the lapse; want 1", got)
	}
	if got := fenceEvents(t, reg, fenceExpired); got != 1 {
		t.Fatalf("fence events expired = %v; want 1", got)
	}
	if e, _ := h.node.Gate(); e != 1 {
		t.Fatalf("epoch after the lapse = %d; want 1 (still the leader of the same term)", e)
	}
}

// With the watchdog running, a stalled holder is counted and logged as
// fenced at valid_until, without any renewal.
func TestWatchdogCountsTheFenceAtValidUntil(t *testing.T) {
	h, s, reg := openStandalone(t, 300*time.Millisecond)
	defer h.close()
	defer s.unblock()
	s.block(t)
	until := h.node.Status().ValidUntil
	waitFor(t, func() bool { return fenceEvents(t, reg, fenceExpired) == 1 })
	if now := time.Now(); now.Before(until) {
		t.Fatalf("fence event counted at %v, before valid_until %v", now, until)
	}
	if _, open := h.node.Gate(); open {
		t.Fatal("gate open after the watchdog fenced")
	}
	for _, r := range []string{fenceLeadershipLost, fenceInactive} {
		if got := fenceEvents(t, reg, r); got != 0 {
			t.Errorf("fence events %s = %v; want 0", r, got)
		}
	}
}

// Renewals keep the window ahead: over several ttls the gate never closes,
// and valid_until moves.
func TestRenewalKeepsTheGateOpen(t *testing.T) {
	h, _, _ := openStandalone(t, 300*time.Millisecond)
	defer h.close()
	first := h.node.Status().ValidUntil
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if _, open := h.node.Gate(); !open {
			t.Fatalf("gate closed at %v though renewals run", time.Now())
		}
	}
	st := h.node.Status()
	if !st.ValidUntil.After(first.Add(500*time.Millisecond)) || st.FenceEvents != 0 || st.FencedReason != "" {
		t.Fatalf("after 1s: %+v; want valid_until moved past %v, no fence event", st, first)
	}
	if d := time.Until(st.ValidUntil); d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("valid_until is %v ahead; want within the ttl", d)
	}
}

// UpdateLease is for external mode only.
func TestUpdateLeaseRefusedOutsideExternal(t *testing.T) {
	h := start(t, t.TempDir())
	defer h.close()
	if _, err := h.node.UpdateLease(context.Background(), nil); !errors.Is(err, ErrNotExternal) {
		t.Fatalf("UpdateLease in standalone mode = %v; want ErrNotExternal", err)
	}
	if got := h.node.Mode(); got != "standalone" {
		t.Fatalf("Mode() = %q", got)
	}
}
