package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/netlab"
)

// Environment of the fault test.
const (
	// faultSeedEnv replays a run: its seed is printed at the start.
	faultSeedEnv = "SITEBOOT_FAULT_SEED"
	// faultCountEnv overrides the number of faults (default 20).
	faultCountEnv = "SITEBOOT_FAULT_COUNT"
)

// leaseTTL is the fault tests' lease.ttl: short, so a run of 20 faults
// takes a few minutes.
const leaseTTL = 2 * time.Second

// resumeBound is how long after a fault service must be back: a new
// holder waits ttl + margin after winning, and winning takes an election
// (about a second) after the old holder's window ran out.
func resumeBound(cfg leaseLabConfig) time.Duration { return 2*cfg.TTL + cfg.Margin + 5*time.Second }

// TestLeaseFaults injects at least 20 random faults into a three-node
// cluster while the probe boots continuously, then checks the whole run:
// never two answerers at once, epochs never decrease, nothing answered or
// signed by a node after it fenced itself, service back after each fault.
func TestLeaseFaults(t *testing.T) {
	// tc cuts the network; mkfs.ext4, mount and fsfreeze give the data
	// dirs disks that can block (.ci/deps installs them all).
	netlab.Require(t, netlab.Needs{Binaries: []string{"tc", "mkfs.ext4", "mount", "umount", "fsfreeze"}})
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(faultSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", faultSeedEnv, s, err)
		}
		seed = v
	}
	count := 20
	if s := os.Getenv(faultCountEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 200 {
			t.Fatalf("%s=%q: want 1-200", faultCountEnv, s)
		}
		count = v
	}
	t.Logf("fault seed %d (%s=%d replays this run), %d faults", seed, faultSeedEnv, seed, count)
	cfg := leaseLabConfig{Cluster: true, TTL: leaseTTL, Margin: time.Second, Disks: true}
	l := newLeaseLab(t, cfg)
	p := l.startProbe()
	r := &faultRun{t: t, l: l, p: p, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), bound: resumeBound(l.cfg)}
	ctx := l.lab.Context()
	if _, err := p.waitScript(ctx, time.Now()); err != nil {
		t.Fatalf("no script before the first fault: %v", err)
	}
	for i := 0; i < count; i++ {
		if err := r.inject(ctx, i); err != nil {
			r.report(t, err)
			t.FailNow()
		}
	}
	p.stop()
	vs := checkLease(r.input())
	if len(vs) > 0 {
		r.report(t, fmt.Errorf("the checker found %d violations:\n%s", len(vs), violationReport(vs)))
	}
}

// faultRun is one run of random faults.
type faultRun struct {
	t      *testing.T
	l      *leaseLab
	p      *probe
	rng    *rand.Rand
	bound  time.Duration
	faults []faultWindow
	order  []int // the first faults' kinds
}

// fault is one kind of fault; run injects it against the holder and
// returns its window.
type fault struct {
	name string
	run  func(r *faultRun, ctx context.Context, holder *leaseNode) (faultWindow, error)
}

func (r *faultRun) kinds() []fault {
	k := []fault{
		{"kill -9 holder", (*faultRun).killHolder},
		{"SIGSTOP holder 2×ttl", (*faultRun).stopHolder},
		{"partition holder both ways", partitionFault(cutBoth)},
		{"partition holder, its packets lost", partitionFault(cutOut)},
		{"partition holder, packets to it lost", partitionFault(cutIn)},
		{"restart a follower during a partition", (*faultRun).restartFollowerPartitioned},
	}
	if r.l.diskReason == "" && r.l.nodes[0].disk != nil {
		k = append(k, fault{"blocked disk of holder", (*faultRun).freezeHolder})
	}
	return k
}

// pick chooses fault i: the first len(kinds) faults are every kind once in
// a random order, the rest are drawn at random.
func (r *faultRun) pick(i int) fault {
	kinds := r.kinds()
	if r.order == nil {
		r.order = r.rng.Perm(len(kinds))
	}
	if i < len(kinds) {
		return kinds[r.order[i]]
	}
	return kinds[r.rng.IntN(len(kinds))]
}

// inject runs fault i: picks a kind, finds the holder, injects, repairs
// (heals, restarts what died) and waits until a script is served again.
func (r *faultRun) inject(ctx context.Context, i int) error {
	f := r.pick(i)
	holder, err := r.holder(ctx)
	if err != nil {
		return fmt.Errorf("fault %d (%s): %w", i, f.name, err)
	}
	r.t.Logf("fault %d: %s (holder %s)", i, f.name, holder.name)
	w, err := f.run(r, ctx, holder)
	w.Name = fmt.Sprintf("fault %d: %s of %s", i, f.name, holder.name)
	if w.Start.IsZero() {
		w.Start, w.End, w.ResumeFrom = time.Now(), time.Now(), time.Now()
	}
	r.faults = append(r.faults, w)
	if rerr := r.repair(); rerr != nil {
		return fmt.Errorf("%s: repair: %w", w.Name, rerr)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	a, err := r.p.waitScript(wctx, time.Now())
	if err != nil {
		return fmt.Errorf("%s: service did not resume after it: %w", w.Name, err)
	}
	r.t.Logf("  longest pause in scripts from the fault on: %v; now served by %s (epoch %d)",
		r.p.longestGap(w.Start).Round(10*time.Millisecond), a.Responder, a.Epoch)
	return nil
}

// holder is the node that served the latest script, asked in the last
// two probe periods or so.
func (r *faultRun) holder(ctx context.Context) (*leaseNode, error) {
	wctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	a, err := r.p.latestScript(wctx, time.Now().Add(-3*probePeriod))
	if err != nil {
		return nil, fmt.Errorf("no holder: %w", err)
	}
	return r.l.node(a.Responder), nil
}

// awaitTakeover waits until a node other than old serves a script asked
// after since.
func (r *faultRun) awaitTakeover(ctx context.Context, old *leaseNode, since time.Time) error {
	wctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	for {
		for name, n := range r.p.responders(since) {
			if name != old.name && n > 0 {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the lease did not move off %s within %v: answers since %s: %v", old.name, r.bound,
				since.Format("15:04:05.000"), r.p.responders(since))
		case <-time.After(probePeriod):
		}
	}
}

func (r *faultRun) killHolder(ctx context.Context, h *leaseNode) (faultWindow, error) {
	start := time.Now()
	w := faultWindow{Start: start, ResumeFrom: start}
	if err := h.kill9(); err != nil {
		return w, err
	}
	w.ResumeFrom = time.Now() // it may have answered until the signal landed
	err := r.awaitTakeover(ctx, h, w.ResumeFrom)
	w.End = time.Now()
	return w, err // repair restarts it
}

func (r *faultRun) stopHolder(ctx context.Context, h *leaseNode) (faultWindow, error) {
	start := time.Now()
	w := faultWindow{Start: start, ResumeFrom: start}
	if err := h.pause(true); err != nil {
		return w, err
	}
	w.ResumeFrom = time.Now()
	sleep(ctx, 2*r.l.cfg.TTL)
	err := r.awaitTakeover(ctx, h, w.ResumeFrom)
	if cerr := h.pause(false); err == nil {
		err = cerr
	}
	w.End = time.Now()
	// Resumed, it must fence itself before its first answer: the probe
	// keeps asking it, and the checker looks at what it sends now.
	sleep(ctx, r.l.cfg.TTL)
	return w, err
}

func partitionFault(dir string) func(*faultRun, context.Context, *leaseNode) (faultWindow, error) {
	return func(r *faultRun, ctx context.Context, h *leaseNode) (faultWindow, error) {
		start := time.Now()
		w := faultWindow{Start: start, ResumeFrom: start}
		if err := r.l.partition(h, dir); err != nil {
			return w, err
		}
		w.ResumeFrom = time.Now()
		err := r.awaitTakeover(ctx, h, w.ResumeFrom)
		w.End = time.Now()
		return w, err // repair heals
	}
}

func (r *faultRun) restartFollowerPartitioned(ctx context.Context, h *leaseNode) (faultWindow, error) {
	var followers []*leaseNode
	for _, n := range r.l.nodes {
		if n != h {
			followers = append(followers, n)
		}
	}
	f := followers[r.rng.IntN(len(followers))]
	start := time.Now()
	w := faultWindow{Start: start, ResumeFrom: start}
	if err := r.l.partition(h, cutBoth); err != nil {
		return w, err
	}
	w.ResumeFrom = time.Now()
	r.t.Logf("  restarting follower %s", f.name)
	if err := f.restart(); err != nil {
		return w, err
	}
	err := r.awaitTakeover(ctx, h, w.ResumeFrom)
	w.End = time.Now()
	return w, err
}

func (r *faultRun) freezeHolder(ctx context.Context, h *leaseNode) (faultWindow, error) {
	start := time.Now()
	w := faultWindow{Start: start}
	hold := 2 * r.l.cfg.TTL
	if err := h.disk.freeze(hold); err != nil {
		return w, err
	}
	// The freeze must hold a write of our own until the thaw.
	blocked := make(chan time.Time, 1)
	go func() {
		_ = os.WriteFile(filepath.Join(h.disk.mnt, "freeze-check"), []byte(start.String()), 0o600)
		blocked <- time.Now()
	}()
	// A write through the site makes the holder's raft log write, which
	// now blocks; a holder whose disk stalls with nothing to write keeps
	// its lease, rightly. It goes through a follower, which forwards it.
	target := r.l.nodes[(r.l.index(h)+1+r.rng.IntN(2))%3]
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, hold+r.bound)
	defer cancel()
	go func() {
		_, err := target.cli(wctx, "entry", "add", "--node-id", "disk-fault", "--mac", netlab.RandomMAC().String(), "--ttl", "1h")
		done <- err
	}()
	sleep(ctx, hold)
	thawAt := time.Now()
	err := h.disk.thaw()
	w.End, w.ResumeFrom = time.Now(), time.Now()
	if at := <-blocked; at.Before(thawAt) {
		err = errors.Join(err, fmt.Errorf("a write to the frozen disk of %s returned after %v, before the thaw", h.name, at.Sub(start)))
	}
	select {
	case werr := <-done:
		r.t.Logf("  entry add through %s during the freeze returned after %v: %v", target.name, time.Since(start).Round(10*time.Millisecond), werr)
	case <-wctx.Done():
		r.t.Logf("  entry add through %s during the freeze still pending %v after the thaw", target.name, r.bound)
		<-done
	}
	return w, err
}

// repair heals partitions, continues stopped nodes and restarts dead
// ones, so the next fault starts from a whole cluster.
func (r *faultRun) repair() error {
	if err := r.l.heal(); err != nil {
		return err
	}
	for _, n := range r.l.nodes {
		if n.paused() {
			if err := n.pause(false); err != nil {
				return err
			}
		}
		if !n.running() {
			if err := n.start(); err != nil {
				return err
			}
		}
	}
	return nil
}

// input is the run for the checker: the probe's answers, every node's
// fence events, the faults.
func (r *faultRun) input() checkInput {
	var fences []fenceEvent
	for _, n := range r.l.nodes {
		fences = append(fences, fenceEvents(n.name, n.logs())...)
	}
	return checkInput{Answers: r.p.snapshot(), Fences: fences, Faults: r.faults, ResumeBound: r.bound, Slack: openSlack}
}

// openSlack is how long before its gate-open line a node may answer: it
// logs right after opening.
const openSlack = 50 * time.Millisecond

// fenceMessages are the lease's log lines for an open gate that closed
// (lease/fence.go): the watchdog's at the end of the window; a renewal
// that found the window already over (a resumed process); and a fence for
// a reason (leadership lost, pushed inactive). A line logged after the
// window ended carries valid_until, when the gate really closed.
// TestFenceMessagesAreTheLeases holds these to the lease package's source.
var fenceMessages = []string{
	"lease: fenced: the window ran out without a renewal; the gate is closed",
	"lease: fenced: the window had run out before this renewal (was the process paused?)",
	"lease: fenced: the gate is closed",
}

// openMessages are the lease's log lines for a gate that opened.
var openMessages = []string{"lease: gate open"}

// fenceEvents reads a node's fence lines, in the order logged: their
// epoch, when the gate closed (valid_until when logged, else the line's
// time) and the next gate-open line after it.
func fenceEvents(node string, lines []logLine) []fenceEvent {
	var out []fenceEvent
	open := 0 // out[open:] have not reopened yet
	for _, l := range lines {
		msg := l.str("msg")
		if slices.Contains(openMessages, msg) {
			for i := open; i < len(out); i++ {
				out[i].Until = l.at()
			}
			open = len(out)
			continue
		}
		if !slices.Contains(fenceMessages, msg) {
			continue
		}
		f, _ := l["epoch"].(float64) // JSON numbers; epochs stay far below 2^53
		epoch := uint64(f)
		if epoch == 0 {
			continue
		}
		at := l.at()
		if v, err := time.Parse(time.RFC3339Nano, l.str("valid_until")); err == nil && v.Before(at) {
			at = v
		}
		out = append(out, fenceEvent{Node: node, Epoch: epoch, At: at})
	}
	return out
}

// report fails the test with err, the holders seen and where the logs
// are kept.
func (r *faultRun) report(t *testing.T, err error) {
	t.Helper()
	dir := keepLabLogs(t, r.l, r.p)
	t.Errorf("%v\nunanswered requests: %s\nfaults:\n%s\nlogs and answers kept in %s", err, r.p.missReport(), r.faultList(), dir)
}

func (r *faultRun) faultList() string {
	var b strings.Builder
	for _, f := range r.faults {
		fmt.Fprintf(&b, "  %s: %s–%s, resume from %s\n", f.Name, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.ResumeFrom.Format("15:04:05.000"))
	}
	return b.String()
}

// keepLabLogs copies the lab's logs and the probe's answers out of the
// lab dir (which the test removes) to a directory that stays.
func keepLabLogs(t *testing.T, l *leaseLab, p *probe) string {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sbt-e2e-%s-lease-%d", l.lab.ID(), time.Now().Unix()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep logs: %v", err)
		return l.lab.Dir()
	}
	logs, _ := filepath.Glob(filepath.Join(l.lab.Dir(), "*.log"))
	for _, f := range logs {
		if b, err := os.ReadFile(f); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644)
		}
	}
	var b strings.Builder
	for _, a := range p.snapshot() {
		b.WriteString(a.String() + "\n")
	}
	_ = os.WriteFile(filepath.Join(dir, "answers.txt"), []byte(b.String()), 0o644)
	return dir
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
