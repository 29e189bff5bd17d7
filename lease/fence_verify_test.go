package lease

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/siteboot/siteboot/site"
)

// lagProxy stands in front of one voter's raft port on loopback: what the
// voter sends back is delivered delay later, and once frozen nothing
// reaches the voter any more (its bytes are dropped). It plays a network
// that is slow in one direction and then cut in the other.
type lagProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
	frozen atomic.Bool
	arm    atomic.Bool  // freeze as the voter next answers, that answer still on its way
	due    atomic.Int64 // unix nanoseconds the newest delayed chunk is delivered at
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newLagProxy(t *testing.T, target string) *lagProxy {
	t.Helper()
	p := &lagProxy{ln: listenLoopback(t), target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *lagProxy) addr() string { return p.ln.Addr().String() }

func (p *lagProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *lagProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.up(c, s)
		go p.down(s, c)
	}
}

// up copies the dialer's bytes to the voter, dropping them while frozen.
func (p *lagProxy) up(from, to net.Conn) {
	defer p.wg.Done()
	defer to.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down copies the voter's bytes back, each chunk delay after it was read.
func (p *lagProxy) down(from, to net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		b  []byte
		at time.Time
	}
	line := make(chan chunk, 4096)
	go func() {
		defer to.Close()
		for c := range line {
			time.Sleep(time.Until(c.at))
			if _, err := to.Write(c.b); err != nil {
				for range line {
				}
				return
			}
		}
	}()
	defer close(line)
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			at := time.Now().Add(time.Duration(p.delay.Load()))
			p.due.Store(at.UnixNano())
			if p.arm.CompareAndSwap(true, false) {
				p.frozen.Store(true)
			}
			line <- chunk{b: append([]byte(nil), buf[:n]...), at: at}
		}
		if err != nil {
			return
		}
	}
}

// TestRenewalNeedsARoundTripStartedAfterT0: a renewal may only extend the
// window to t0 + ttl when a quorum confirmed the leadership after t0. Here
// the followers' answers reach the leader 200 ms late, and then nothing
// reaches the followers any more (they may be voting for a new leader by
// now). Answers to heartbeats the followers took before that are still
// on their way after t0: raft's VerifyLeader counts them and confirms a
// leadership nobody confirmed after t0, which can keep the old holder's
// window open while a new holder's opens. The check must fail instead.
func TestRenewalNeedsARoundTripStartedAfterT0(t *testing.T) {
	addrs := freeAddrs(t, 3)
	proxies := make([]*lagProxy, 3)
	for i, a := range addrs {
		proxies[i] = newLagProxy(t, a)
	}
	nodes := make([]*Node, 3)
	for i, a := range addrs {
		var join []string
		for j, p := range proxies {
			if j != i {
				join = append(join, p.addr())
			}
		}
		n, err := Open(Config{Mode: Cluster, Dir: t.TempDir(), ID: fmt.Sprintf("appliance-%d", i+1), Bind: a,
			Advertise: proxies[i].addr(), Join: join, TTL: 3 * time.Second, Margin: time.Second,
			HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, StateMachine: site.NewState(), Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
		t.Cleanup(func() { _ = n.Close() })
	}
	var leader *Node
	var followers []int
	waitFor(t, func() bool {
		leader, followers = nil, nil
		for i, n := range nodes {
			if n.raft.State() == raft.Leader {
				leader = n
			} else {
				followers = append(followers, i)
			}
		}
		return leader != nil
	})
	if err := leader.verify(); err != nil {
		t.Fatalf("verify on a healthy cluster: %v", err)
	}
	for _, i := range followers {
		proxies[i].delay.Store(int64(200 * time.Millisecond))
	}
	time.Sleep(time.Second) // the late answers keep the leader's raft lease alive (500 ms)
	if leader.raft.State() != raft.Leader {
		t.Fatal("setup: the leader stepped down with answers 200 ms late")
	}
	// Cut the way to each follower as it answers, so that the last
	// follower cut has an answer on its way for another 200 ms.
	for _, i := range followers {
		proxies[i].arm.Store(true)
	}
	waitFor(t, func() bool {
		for _, i := range followers {
			if !proxies[i].frozen.Load() {
				return false
			}
		}
		return true
	})
	if !slices.ContainsFunc(followers, func(i int) bool {
		return time.Until(time.Unix(0, proxies[i].due.Load())) > 100*time.Millisecond
	}) {
		t.Fatal("setup: no answer from before the cut is still on its way")
	}
	// t0 is now: nothing the leader sends from here on reaches a follower.
	done := make(chan error, 1)
	go func() { done <- leader.verify() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("leadership verified after t0 with no follower reachable since before t0: a stale answer was counted")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("verify did not return within 10s")
	}
}
