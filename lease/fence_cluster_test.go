package lease

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	"github.com/siteboot/siteboot/site"
)

// freeAddrs reserves n loopback ports and frees them again, for voters
// that must know each other's addresses before they start.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

const (
	clusterTTL    = time.Second
	clusterMargin = 300 * time.Millisecond
)

// clusterConfig is voter i of addrs in cluster mode over plain loopback
// TCP, with fast raft timing.
func clusterConfig(t *testing.T, dir string, addrs []string, i int) Config {
	var join []string
	for j, a := range addrs {
		if j != i {
			join = append(join, a)
		}
	}
	return Config{Mode: Cluster, Dir: dir, ID: fmt.Sprintf("appliance-%d", i+1), Bind: addrs[i], Join: join,
		TTL: clusterTTL, Margin: clusterMargin, HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		StateMachine: site.NewState(), Logger: quietLog()}
}

// startCluster opens and runs three voters on loopback and waits until all
// are ready.
func startCluster(t *testing.T) []*harness {
	t.Helper()
	addrs := freeAddrs(t, 3)
	nodes := make([]*Node, 3)
	for i := range nodes {
		n, err := Open(clusterConfig(t, t.TempDir(), addrs, i))
		if err != nil {
			for _, o := range nodes[:i] {
				_ = o.Close()
			}
			t.Fatal(err)
		}
		nodes[i] = n
	}
	hs := make([]*harness, 3)
	for i, n := range nodes {
		hs[i] = run(t, n.cfg.Dir, n, n.cfg.StateMachine.(*site.State))
	}
	return hs
}

// sampler watches every node's gate until stopped: it fails the test when
// two gates are open at once, and records when each node was first open
// and the furthest valid_until each reported.
type sampler struct {
	t     *testing.T
	nodes []*Node
	stop  chan struct{}
	done  chan struct{}

	mu        sync.Mutex
	firstOpen map[int]time.Time
	lastUntil map[int]time.Time
	epochs    map[int][]uint64
	overlap   string
}

func sample(t *testing.T, nodes []*Node) *sampler {
	s := &sampler{t: t, nodes: nodes, stop: make(chan struct{}), done: make(chan struct{}),
		firstOpen: map[int]time.Time{}, lastUntil: map[int]time.Time{}, epochs: map[int][]uint64{}}
	go s.loop()
	return s
}

func (s *sampler) loop() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(2 * time.Millisecond):
		}
		var open []int
		now := time.Now()
		for i, n := range s.nodes {
			e, ok := n.Gate()
			if !ok {
				continue
			}
			open = append(open, i)
			s.mu.Lock()
			if _, seen := s.firstOpen[i]; !seen {
				s.firstOpen[i] = now
			}
			if es := s.epochs[i]; len(es) == 0 || es[len(es)-1] != e {
				s.epochs[i] = append(es, e)
			}
			if u := n.Status().ValidUntil; u.After(s.lastUntil[i]) {
				s.lastUntil[i] = u
			}
			s.mu.Unlock()
		}
		if len(open) > 1 {
			s.mu.Lock()
			s.overlap = fmt.Sprintf("gates of nodes %v open at once at %v", open, now)
			s.mu.Unlock()
		}
	}
}

func (s *sampler) finish() {
	close(s.stop)
	<-s.done
	if s.overlap != "" {
		s.t.Fatal(s.overlap)
	}
}

func (s *sampler) opened(i int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.firstOpen[i]
	return t, ok
}

func holderOf(hs []*harness) int {
	for i, h := range hs {
		if _, open := h.node.Gate(); open {
			return i
		}
	}
	return -1
}

// Three voters started with each other's addresses form one cluster with
// the same configuration, elect one holder, and when it dies the new one
// opens no sooner than ttl + margin after the old one's last window, with
// a higher epoch; two gates are never open at once.
func TestClusterOneHolderAndTheNewOneWaits(t *testing.T) {
	hs := startCluster(t)
	closed := make([]bool, 3)
	defer func() {
		for i, h := range hs {
			if !closed[i] {
				h.close()
			}
		}
	}()
	var nodes []*Node
	for _, h := range hs {
		nodes = append(nodes, h.node)
	}
	s := sample(t, nodes)
	waitFor(t, func() bool { return holderOf(hs) >= 0 })
	old := holderOf(hs)

	// One configuration, ids = advertised addresses, on every member.
	var want []string
	for _, h := range hs {
		want = append(want, h.node.cfg.Advertise)
		if got := string(h.node.trans.LocalAddr()); got != h.node.cfg.Advertise {
			t.Errorf("transport LocalAddr = %s; want the advertise address %s", got, h.node.cfg.Advertise)
		}
	}
	slices.Sort(want)
	for i, h := range hs {
		f := h.node.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, srv := range f.Configuration().Servers {
			if string(srv.ID) != string(srv.Address) || srv.Suffrage != raft.Voter {
				t.Errorf("node %d: server %+v; want a voter whose id is its address", i, srv)
			}
			ids = append(ids, string(srv.ID))
		}
		if diff := cmp.Diff(want, ids); diff != "" {
			t.Errorf("node %d configuration (-want +got):\n%s", i, diff)
		}
	}
	// A write lands, on every member.
	hs[old].put("n1", "52:54:00:00:00:01")
	for _, h := range hs {
		waitFor(t, func() bool { return len(listed(h.state)) == 1 })
	}
	oldEpoch, _ := hs[old].node.Gate()

	// kill -9 of the holder: raft stops, its window is not given up.
	time.Sleep(clusterTTL / 2) // a renewal or two after it opened
	hs[old].stop()
	<-hs[old].done
	_ = hs[old].node.raft.Shutdown().Error()
	closeTransport(hs[old].node.trans)
	// Wait until the sampler, too, has seen the new holder open: the gate
	// may open between two of its samples, and finish stops it.
	waitFor(t, func() bool {
		i := holderOf(hs)
		if i < 0 || i == old {
			return false
		}
		_, seen := s.opened(i)
		return seen
	})
	s.finish()
	_ = hs[old].node.store.Close()
	closed[old] = true

	next := holderOf(hs)
	opened, _ := s.opened(next)
	lastOld := s.lastUntil[old]
	if lastOld.IsZero() {
		t.Fatal("the old holder's window was never sampled")
	}
	if gap := opened.Sub(lastOld); gap < clusterMargin {
		t.Fatalf("the new holder opened %v after the old holder's last valid_until; want at least the margin %v", gap, clusterMargin)
	}
	if e, _ := hs[next].node.Gate(); e <= oldEpoch {
		t.Fatalf("new epoch %d; want above %d", e, oldEpoch)
	}
	st := hs[next].node.Status()
	if !st.Active || st.Holder != hs[next].node.cfg.ID || st.Leader != hs[next].node.cfg.Advertise || st.Mode != Cluster {
		t.Fatalf("new holder's status = %+v", st)
	}
	for i, h := range hs {
		if i == old || i == next {
			continue
		}
		st := h.node.Status()
		if st.Active || !strings.Contains(st.FencedReason, "not the raft leader") || st.Leader != hs[next].node.cfg.Advertise {
			t.Fatalf("follower %d status = %+v; want fenced as a follower naming the leader", i, st)
		}
		select {
		case <-h.node.Ready():
		default:
			t.Fatalf("follower %d is not ready; a follower with a leader is", i)
		}
	}
}

// A holder whose renewals stall (a paused process, a blocked disk) stops
// answering at valid_until on its own, though raft still has it lead.
func TestClusterStalledHolderFencesAtValidUntil(t *testing.T) {
	addrs := freeAddrs(t, 3)
	var nodes []*Node
	for i := range addrs {
		n, err := Open(clusterConfig(t, t.TempDir(), addrs, i))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	var hs []*harness
	var stalls []*stall
	defer func() {
		for i, h := range hs {
			stalls[i].unblock() // before close: Run waits for its renewal
			h.close()
		}
	}()
	for _, n := range nodes {
		stalls = append(stalls, stallable(n))
	}
	for _, n := range nodes {
		hs = append(hs, run(t, n.cfg.Dir, n, n.cfg.StateMachine.(*site.State)))
	}
	waitFor(t, func() bool { return holderOf(hs) >= 0 })
	h := holderOf(hs)
	stalls[h].block(t)
	until := hs[h].node.Status().ValidUntil
	waitFor(t, func() bool { _, open := hs[h].node.Gate(); return !open })
	if now := time.Now(); now.Before(until) {
		t.Fatalf("closed at %v, before valid_until %v", now, until)
	} else if now.After(until.Add(clusterTTL / 3)) {
		t.Fatalf("closed at %v, well after valid_until %v", now, until)
	}
	if got := hs[h].node.raft.State(); got != raft.Leader {
		t.Fatalf("raft state %s; the test needs the stalled holder to still lead", got)
	}
	waitFor(t, func() bool { return hs[h].node.Status().FenceEvents == 1 })
	if r := hs[h].node.Status().FencedReason; !strings.Contains(r, "without a renewal") {
		t.Fatalf("fenced reason %q", r)
	}
}

// Only 3 or 5 voters form a cluster; the refusal says why, before
// anything is written or bound.
func TestClusterVoterCounts(t *testing.T) {
	addrs := freeAddrs(t, 6)
	tests := []struct {
		name   string
		voters int
		want   string
	}{
		{"one", 1, "a cluster of one is mode standalone"},
		{"two", 2, "2 voters stop when 1 fail, which tolerates no more failures than 1 voters; use 3 or 5"},
		{"four", 4, "4 voters stop when 2 fail, which tolerates no more failures than 3 voters; use 3 or 5"},
		{"six", 6, "a site runs 3 or 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := clusterConfig(t, dir, addrs[:tt.voters], 0)
			_, err := Open(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "raft join") {
				t.Fatalf("Open with %d voters = %v; want an error naming join containing %q", tt.voters, err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "raft.db.new")); err == nil {
				t.Fatal("a refused configuration created raft state")
			}
			ln, err := net.Listen("tcp", addrs[0])
			if err != nil {
				t.Fatalf("a refused configuration holds its port: %v", err)
			}
			ln.Close()
		})
	}
	for _, bad := range []Config{
		{Mode: Cluster, Bind: "", Join: addrs[1:3]},
		{Mode: Cluster, Bind: addrs[0], Join: []string{addrs[1], "nohost"}},
		{Mode: Cluster, Bind: addrs[0], Advertise: "0.0.0.0:7390", Join: addrs[1:3]},
		{Mode: Standalone, Join: addrs[1:3]},
		{Mode: External, Join: addrs[1:3]},
		{Mode: "leader"},
	} {
		bad.Dir, bad.ID, bad.StateMachine, bad.Logger = t.TempDir(), "a", site.NewState(), quietLog()
		if _, err := Open(bad); err == nil {
			t.Errorf("Open(%+v) succeeded", bad)
		}
	}
}

// A data dir keeps the mode it was created in: a standalone one is refused
// in cluster mode (it would lead its single-voter configuration alone, next
// to the cluster) and the other way round.
func TestDataDirOfAnotherMode(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	h.close()
	addrs := freeAddrs(t, 3)
	cfg := clusterConfig(t, dir, addrs, 0)
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "do not include this one") {
		t.Fatalf("cluster Open of a standalone data dir = %v; want refused", err)
	}
	h2 := start(t, dir) // still fine as it was made
	h2.close()
}

// A new holder that loses leadership while it waits ttl + margin never
// opens; the next one takes a higher epoch and waits afresh.
func TestClusterHolderLosingLeadershipWhileWaitingNeverOpens(t *testing.T) {
	hs := startCluster(t)
	defer func() {
		for _, h := range hs {
			h.close()
		}
	}()
	var nodes []*Node
	for _, h := range hs {
		nodes = append(nodes, h.node)
	}
	s := sample(t, nodes)
	first := -1
	waitFor(t, func() bool {
		for i, h := range hs {
			if h.node.raft.State() == raft.Leader && strings.Contains(h.node.Status().FencedReason, "waits ttl + margin") {
				first = i
				return true
			}
		}
		return false
	})
	if err := hs[first].node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	waitFor(t, func() bool { i := holderOf(hs); return i >= 0 && i != first })
	s.finish()
	if at, opened := s.opened(first); opened {
		t.Fatalf("node %d opened at %v though it lost leadership while waiting", first, at)
	}
	next := holderOf(hs)
	if e, _ := hs[next].node.Gate(); e < 2 {
		t.Fatalf("new holder's epoch %d; want above the first holder's", e)
	}
	if st := hs[first].node.Status(); st.Active || st.FenceEvents != 0 {
		t.Fatalf("first holder: %+v; want fenced, with no fence event (it never opened)", st)
	}
}
