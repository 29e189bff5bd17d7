package lease

import (
	"time"

	"github.com/hashicorp/raft"
)

// Why the gate closed on its own: the reason label of
// siteboot_lease_fence_events_total.
const (
	fenceExpired        = "expired"         // the window ran out without a renewal (a paused process, a stalled disk, a partition)
	fenceLeadershipLost = "leadership_lost" // raft leadership was lost or could not be verified
	fenceInactive       = "inactive"        // the control plane pushed active=false (external mode)
)

var fenceReasons = []string{fenceExpired, fenceLeadershipLost, fenceInactive}

// window is this node's lease window. The gate is open while epoch is not 0
// and the monotonic clock is before until: nothing has to run for it to
// close.
type window struct {
	epoch  uint64        // the epoch held; 0 while none
	until  time.Time     // the end of the window, with its monotonic reading; zero while not opened
	ttl    time.Duration // the ttl it was granted with
	reason string        // why the gate is closed, when it is for a reason other than the time
	open   bool          // opened and its end not yet counted as a fence event
}

// Gate reports whether this appliance may answer now, and under which
// epoch. It is checked right before every proxy reply, script and
// signature: open while this node holds an epoch and the monotonic clock is
// before the end of its window (and, in raft lease modes, raft says it
// leads). It reads the clock itself, so a process resumed after a pause
// finds its window gone on its first check.
func (n *Node) Gate() (epoch uint64, open bool) {
	n.mu.Lock()
	e, until := n.win.epoch, n.win.until
	n.mu.Unlock()
	if e == 0 || !time.Now().Before(until) {
		return 0, false
	}
	if n.cfg.Mode != External && n.raft.State() != raft.Leader {
		return 0, false
	}
	return e, true
}

// take holds epoch with the gate still closed for reason (until extend
// opens it).
func (n *Node) take(epoch uint64, reason string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.win = window{epoch: epoch, reason: reason}
}

// extend opens, or renews, the window of epoch: it ends at t0+ttl, t0
// being a time taken before the check that justified it. Nothing changes
// when the node no longer holds epoch.
func (n *Node) extend(epoch uint64, t0 time.Time, ttl time.Duration) {
	until := t0.Add(ttl)
	n.mu.Lock()
	if n.win.epoch != epoch {
		n.mu.Unlock()
		return
	}
	now := time.Now()
	ended := n.win.until
	lapsed := n.win.open && !now.Before(ended) // the watchdog has not run yet: paused
	if lapsed {
		n.countLocked(fenceExpired)
	}
	opened := !n.win.open
	n.win.until, n.win.ttl, n.win.reason = until, ttl, ""
	n.win.open = now.Before(until)
	if !n.win.open {
		n.win.reason = "the check before the renewal took longer than the ttl"
	}
	n.armLocked(until)
	n.mu.Unlock()
	if lapsed {
		n.log.Warn("lease: fenced: the window had run out before this renewal (was the process paused?)", "epoch", epoch,
			"valid_until", ended.Round(0), "reason", fenceExpired)
	}
	if opened && until.After(now) {
		n.log.Info("lease: gate open", "epoch", epoch, "ttl", ttl, "valid_until", until.Round(0))
	}
}

// armLocked sets the watchdog to fire at until.
func (n *Node) armLocked(until time.Time) {
	d := time.Until(until)
	if n.watchdog == nil {
		n.watchdog = time.AfterFunc(d, n.watch)
		return
	}
	n.watchdog.Reset(d)
}

// watch is the watchdog: a timer of its own, not one of raft's goroutines.
// The gate closes by itself at the end of the window; watch counts and
// logs that it did.
func (n *Node) watch() {
	n.mu.Lock()
	lapsed := n.win.open && !time.Now().Before(n.win.until)
	if lapsed {
		n.countLocked(fenceExpired)
	}
	epoch, until := n.win.epoch, n.win.until
	n.mu.Unlock()
	if lapsed {
		n.log.Warn("lease: fenced: the window ran out without a renewal; the gate is closed", "epoch", epoch,
			"valid_until", until.Round(0), "reason", fenceExpired)
	}
}

// fence closes the gate now for a reason that is counted (label) and
// told (why). With drop the epoch is given up too.
func (n *Node) fence(label, why string, drop bool) {
	n.mu.Lock()
	was := n.win.open
	if was {
		n.countLocked(label)
	}
	epoch, ended := n.win.epoch, n.win.until
	if drop {
		n.win = window{reason: why}
	} else {
		n.win.until, n.win.reason = time.Time{}, why
	}
	n.mu.Unlock()
	if !was {
		return
	}
	if time.Now().Before(ended) {
		n.log.Warn("lease: fenced: the gate is closed", "epoch", epoch, "reason", label, "why", why)
		return
	}
	// The window had already run out (the process was paused, say): the
	// gate closed then, not now.
	n.log.Warn("lease: fenced: the gate is closed", "epoch", epoch, "reason", label, "why", why, "valid_until", ended.Round(0))
}

// release gives the epoch up without counting a fence event: the node
// stops.
func (n *Node) release(why string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.win = window{reason: why}
}

// countLocked records the end of an open window as a fence event.
func (n *Node) countLocked(label string) {
	n.win.open = false
	n.events++
	n.fences.WithLabelValues(label).Inc()
}

// markReady closes Ready once.
func (n *Node) markReady() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.ready {
		n.ready = true
		close(n.readyCh)
	}
}

// Ready is closed once this node's state is usable for reads and writes:
// in standalone mode when it first held the lease; in cluster mode once it
// applied its log and a leader is known (a follower is ready too); in
// external mode once its log is applied.
func (n *Node) Ready() <-chan struct{} { return n.readyCh }
