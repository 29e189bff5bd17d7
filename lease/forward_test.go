package lease

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
)

// member is one voter of a test cluster.
type member struct {
	addr  string
	node  *Node
	state *site.State
	store *site.Store
	key   *ecdsa.PrivateKey
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln := listenLoopback(t)
	defer ln.Close()
	return ln.Addr().String()
}

func newKey(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return k, der
}

// openMember opens a cluster-mode node on a free loopback port (plain
// TCP), its server id its address, and runs its lease loop until the test
// ends.
func openMember(t *testing.T, bootstrap bool, join []string) *member {
	t.Helper()
	return openMemberTLS(t, bootstrap, join, nil)
}

// openMemberTLS is openMember with mutual TLS from ca (plain TCP if nil).
func openMemberTLS(t *testing.T, bootstrap bool, join []string, ca *testCA) *member {
	t.Helper()
	addr := freeAddr(t)
	var files TLSFiles
	if ca != nil {
		files = ca.files(t, addr, leafOpts{})
	}
	key, der := newKey(t)
	st := site.NewState()
	n, err := open(Config{Mode: Cluster, Dir: t.TempDir(), ID: addr, Bind: addr, Advertise: addr, Join: join,
		PublicKey: der, StateMachine: st, TLS: files, Logger: quietLog(),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond}, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run %s: %v", addr, err)
		}
		if err := n.Close(); err != nil {
			t.Errorf("Close %s: %v", addr, err)
		}
	})
	m := &member{addr: addr, node: n, state: st, key: key}
	m.store = site.NewStore(site.StoreConfig{State: st, Applier: n, Now: time.Now, Limits: site.Limits{DefaultTTL: time.Hour}, Logger: quietLog()})
	return m
}

// startCluster starts a cluster of size voters: the first bootstraps and
// leads, the others wait and are added with AddVoter.
func startCluster(t *testing.T, size int) []*member {
	t.Helper()
	return startClusterTLS(t, size, nil)
}

func startClusterTLS(t *testing.T, size int, ca *testCA) []*member {
	t.Helper()
	first := openMemberTLS(t, true, nil, ca)
	waitFor(t, func() bool { return first.node.raft.State() == raft.Leader })
	ms := []*member{first}
	for range size - 1 {
		m := openMemberTLS(t, false, nil, ca)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := first.node.AddVoter(ctx, m.addr)
		cancel()
		if err != nil {
			t.Fatalf("AddVoter %s: %v", m.addr, err)
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(m.node.Members()) == size })
	}
	return ms
}

func leaderOf(t *testing.T, ms []*member) (leader *member, followers []*member) {
	t.Helper()
	waitFor(t, func() bool {
		leader, followers = nil, nil
		for _, m := range ms {
			if m.node.raft.State() == raft.Leader {
				leader = m
			} else {
				followers = append(followers, m)
			}
		}
		return leader != nil
	})
	return leader, followers
}

// TestWriteThroughFollower: a site write on a follower is committed by the
// leader and lands on every member; the follower answers with its own
// state machine's result, the same as the leader's, refusals included.
func TestWriteThroughFollower(t *testing.T) {
	ms := startCluster(t, 3)
	leader, followers := leaderOf(t, ms)
	f := followers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := f.store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}})
	if err != nil {
		t.Fatalf("PrepareRamdisk on a follower: %v", err)
	}
	if len(stored) != 1 || stored[0].GetEntry().GetMac() != "52:54:00:00:00:01" {
		t.Fatalf("the follower returned %v; want the stored entry", stored)
	}
	// The result was read after the follower applied it: its state has it now.
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01"}, listed(f.state)); diff != "" {
		t.Fatalf("follower state right after the write (-want +got):\n%s", diff)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}

	// A command the state machine refuses: the same error on both.
	bad, err := proto.Marshal(&statev1.SiteCommand{Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n2"}}})
	if err != nil {
		t.Fatal(err)
	}
	resF, err := f.node.ApplySite(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	resL, err := leader.node.ApplySite(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	ef, okF := resF.(error)
	el, okL := resL.(error)
	if !okF || !okL || ef.Error() != el.Error() {
		t.Fatalf("refused command: follower %v, leader %v; want the same error", resF, resL)
	}
}

// TestNoLeaderIsNotLeaderError: a node that knows no leader refuses a
// write with a *NotLeaderError instead of waiting.
func TestNoLeaderIsNotLeaderError(t *testing.T) {
	lone := openMember(t, false, nil) // never added: no leader, ever
	_, err := lone.node.ApplySite(context.Background(), []byte{})
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != "" {
		t.Fatalf("ApplySite with no leader = %v; want a *NotLeaderError naming none", err)
	}
	if err := lone.node.AddVoter(context.Background(), "127.0.0.1:1"); !errors.As(err, &nl) {
		t.Fatalf("AddVoter with no leader = %v; want a *NotLeaderError", err)
	}
}

// fakeLeader answers every forward request with resp, counting them.
func fakeLeader(t *testing.T, resp func() forwardResponse) (addr string, requests chan forwardRequest) {
	t.Helper()
	ln := listenLoopback(t)
	t.Cleanup(func() { ln.Close() })
	requests = make(chan forwardRequest, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			magic := make([]byte, len(forwardMagic))
			if _, err := io.ReadFull(c, magic); err == nil && string(magic) == forwardMagic {
				if req, err := readRequest(c); err == nil {
					requests <- req
					_, _ = c.Write(resp().encode())
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), requests
}

// TestForwardRetriesOnceAtTheNewLeader: a leader that lost leadership
// names the new one, which is asked once; two in a row end in a
// *NotLeaderError.
func TestForwardRetriesOnceAtTheNewLeader(t *testing.T) {
	ms := startCluster(t, 3)
	leader, followers := leaderOf(t, ms)
	f := followers[0]
	old, reqs := fakeLeader(t, func() forwardResponse { return forwardResponse{status: statusNotLeader, message: leader.addr} })
	cmd, err := proto.Marshal(&statev1.SiteCommand{At: nil})
	if err != nil {
		t.Fatal(err)
	}
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_SiteCommand{SiteCommand: cmd}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := leader.node.raft.LastIndex()
	index, err := f.node.forwardTo(ctx, old, opApply, data)
	if err != nil {
		t.Fatalf("forward via a former leader: %v", err)
	}
	if index <= before {
		t.Fatalf("index %d; want one after %d, committed by the real leader", index, before)
	}
	if got := len(reqs); got != 1 {
		t.Fatalf("the former leader got %d requests; want 1", got)
	}

	loop, _ := fakeLeader(t, func() forwardResponse { return forwardResponse{status: statusNotLeader} })
	other, _ := fakeLeader(t, func() forwardResponse { return forwardResponse{status: statusNotLeader, message: loop} })
	_, err = f.node.forwardTo(ctx, other, opApply, data)
	var nl *NotLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("two former leaders in a row = %v; want a *NotLeaderError", err)
	}
}

// dialForward opens a forward connection to n's raft port.
func dialForward(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(forwardMagic)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestForwardServerRefusals: the leader's forward side refuses what it
// must — an oversized request before reading it, a lease epoch (only site
// commands and member keys are forwarded), garbage — and changes nothing;
// raft's own connections still work beside it.
func TestForwardServerRefusals(t *testing.T) {
	ms := startCluster(t, 3)
	leader, followers := leaderOf(t, ms)
	applied := leader.node.AppliedIndex()

	big := dialForward(t, leader.addr)
	hdr := []byte{byte(opApply), 0, 0, 0x27, 0x10, 0, 0, 0, 0}
	hdr[5], hdr[6], hdr[7], hdr[8] = 0xff, 0xff, 0xff, 0xff
	if _, err := big.Write(hdr); err != nil {
		t.Fatal(err)
	}
	resp, err := readResponse(big)
	if err != nil || resp.status != statusFailed || !bytes.Contains([]byte(resp.message), []byte("limit")) {
		t.Fatalf("oversized request: %+v, %v; want a failure naming the limit", resp, err)
	}
	expectClosed(t, big, 5*time.Second)

	epoch, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_LeaseEpoch{LeaseEpoch: &statev1.LeaseEpoch{Epoch: 99, Holder: "evil"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := dialForward(t, leader.addr)
	body, _ := forwardRequest{op: opApply, timeout: time.Second, payload: epoch}.encode()
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	if resp, err := readResponse(c); err != nil || resp.status != statusFailed {
		t.Fatalf("forwarded lease epoch: %+v, %v; want refused", resp, err)
	}
	// One connection, one request after another.
	body, _ = forwardRequest{op: opApply, timeout: time.Second, payload: []byte{0xff}}.encode()
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	if resp, err := readResponse(c); err != nil || resp.status != statusFailed {
		t.Fatalf("undecodable entry: %+v, %v; want refused", resp, err)
	}
	if got := leader.node.AppliedIndex(); got != applied {
		t.Fatalf("applied index moved from %d to %d", applied, got)
	}
	if e, _ := leader.node.fsm.current(); e >= 99 {
		t.Fatalf("epoch %d taken from a forwarded entry", e)
	}
	// A follower's forward request lands.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := followers[1].store.PrepareRamdisk(ctx, "n3", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:03"}}); err != nil {
		t.Fatalf("write through the other follower: %v", err)
	}
}

// TestForwardPerPeerLimit: a peer holds at most maxForwardPerPeer forward
// connections; the next is told so and closed.
func TestForwardPerPeerLimit(t *testing.T) {
	ms := startCluster(t, 3)
	leader, _ := leaderOf(t, ms)
	var held []net.Conn
	for range maxForwardPerPeer {
		held = append(held, dialForward(t, leader.addr))
	}
	waitFor(t, func() bool {
		leader.node.fwd.mu.Lock()
		defer leader.node.fwd.mu.Unlock()
		return leader.node.fwd.total == maxForwardPerPeer
	})
	over := dialForward(t, leader.addr)
	resp, err := readResponse(over)
	if err != nil || resp.status != statusFailed || !bytes.Contains([]byte(resp.message), []byte("per peer")) {
		t.Fatalf("connection past the limit: %+v, %v; want refused", resp, err)
	}
	// The held ones still serve.
	body, _ := forwardRequest{op: opApply, timeout: time.Second, payload: []byte{0xff}}.encode()
	if _, err := held[0].Write(body); err != nil {
		t.Fatal(err)
	}
	if resp, err := readResponse(held[0]); err != nil || resp.status != statusFailed {
		t.Fatalf("held connection: %+v, %v", resp, err)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, func() bool {
		leader.node.fwd.mu.Lock()
		defer leader.node.fwd.mu.Unlock()
		return leader.node.fwd.total == 0 && len(leader.node.fwd.perPeer) == 0
	})
}

// TestMembershipThroughFollower: members, their published keys, and a
// voter removed and added again through a follower.
func TestMembershipThroughFollower(t *testing.T) {
	ms := startCluster(t, 3)
	leader, followers := leaderOf(t, ms)
	for _, m := range ms {
		waitFor(t, func() bool { return len(m.node.Keys()) == 3 })
	}
	f := followers[0]
	got := f.node.Members()
	var want []Member
	for _, m := range ms {
		want = append(want, Member{ServerID: m.addr, Address: m.addr, Suffrage: "Voter", Leader: m == leader,
			NodeID: m.addr, KeyID: keyIDOf(t, &m.key.PublicKey)})
	}
	sortMembers := func(s []Member) { slices.SortFunc(s, func(a, b Member) int { return cmpString(a.Address, b.Address) }) }
	sortMembers(got)
	sortMembers(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Members on a follower (-want +got):\n%s", diff)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone := followers[1]
	if err := f.node.RemoveServer(ctx, gone.addr); err != nil {
		t.Fatalf("RemoveServer through a follower: %v", err)
	}
	for _, m := range []*member{leader, f} {
		waitFor(t, func() bool { return len(m.node.Members()) == 2 })
		// The removed member's key is no longer one of the site's keys.
		for _, k := range m.node.Keys() {
			if k.Address == gone.addr {
				t.Fatalf("%s still serves the key of the removed %s", m.addr, gone.addr)
			}
		}
		if n := len(m.node.Keys()); n != 2 {
			t.Fatalf("%s has %d keys after the removal; want 2", m.addr, n)
		}
	}
	if err := f.node.AddVoter(ctx, gone.addr); err != nil {
		t.Fatalf("AddVoter through a follower: %v", err)
	}
	waitFor(t, func() bool { return len(leader.node.Members()) == 3 && len(leader.node.Keys()) == 3 })

	var ae *AddressError
	for _, bad := range []string{"", "no-port", "host:0", "host:99999", " :1"} {
		if err := f.node.AddVoter(ctx, bad); !errors.As(err, &ae) {
			t.Errorf("AddVoter(%q) = %v; want an *AddressError", bad, err)
		}
	}
	if err := f.node.RemoveServer(ctx, "127.0.0.1:1"); !errors.As(err, &ae) {
		t.Errorf("RemoveServer of no member = %v; want an *AddressError", err)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func keyIDOf(t *testing.T, pub *ecdsa.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return keyID(der)
}

// TestMembershipNeedsClusterMode: a standalone node refuses membership
// changes with ErrNotCluster and lists itself.
func TestMembershipNeedsClusterMode(t *testing.T) {
	_, der := newKey(t)
	h := startConfig(t, Config{Dir: t.TempDir(), PublicKey: der})
	defer h.close()
	for name, op := range map[string]func(context.Context, string) error{"AddVoter": h.node.AddVoter, "RemoveServer": h.node.RemoveServer} {
		if err := op(context.Background(), "127.0.0.1:7390"); !errors.Is(err, ErrNotCluster) {
			t.Errorf("%s in standalone mode = %v; want ErrNotCluster", name, err)
		}
	}
	waitFor(t, func() bool { return len(h.node.Keys()) == 1 })
	k := h.node.Keys()[0]
	if k.NodeID != "appliance-1" || k.Address != "" || k.KID != keyID(der) {
		t.Fatalf("standalone key %+v", k)
	}
	got := h.node.Members()
	if len(got) != 1 || !got[0].Leader || got[0].NodeID != "appliance-1" || got[0].KeyID != k.KID {
		t.Fatalf("standalone members %+v", got)
	}
}

// TestWriteThroughFollowerOverTLS: forwarding rides the raft port's mutual
// TLS; a client with a certificate of another CA gets no forward
// connection, and raft on the same port is unaffected.
func TestWriteThroughFollowerOverTLS(t *testing.T) {
	ca := newTestCA(t, "site ca")
	ms := startClusterTLS(t, 3, ca)
	leader, followers := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := followers[0].store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}}); err != nil {
		t.Fatalf("write through a follower over TLS: %v", err)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}

	foreign := newTestCA(t, "another ca").keyPair(t, "impostor", leafOpts{})
	conf := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{foreign}}
	c, err := tls.Dial("tcp", leader.addr, conf)
	if err == nil {
		defer c.Close()
		body, _ := forwardRequest{op: opApply, timeout: time.Second, payload: []byte{0xff}}.encode()
		_, _ = c.Write(append([]byte(forwardMagic), body...))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := readResponse(c); err == nil {
			t.Fatalf("a peer of another CA got a forward response %+v", resp)
		}
	}
	waitFor(t, func() bool { return refusedCount(leader.node, reasonUnknownAuthority) == 1 })
}

// TestStreamTellsForwardFromRaft: a connection opening with the forward
// greeting goes to the forward handler and never to raft; a raft
// connection reaches Accept with its first byte intact; one that sends
// nothing is dropped at the deadline.
func TestStreamTellsForwardFromRaft(t *testing.T) {
	ref := newRefusals(quietLog(), time.Now)
	got := make(chan string, 1)
	s := newStreamLayer(listenLoopback(t), streamConfig{refusals: ref, handshakeTimeout: 300 * time.Millisecond,
		maxConns: 8, maxHandshakes: 8, forward: func(_ context.Context, c net.Conn) {
			b := make([]byte, 3)
			_, _ = io.ReadFull(c, b)
			got <- string(b)
		}})
	defer s.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(first string) net.Conn {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if first != "" {
			if _, err := c.Write([]byte(first)); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	dial(forwardMagic)
	select {
	case g := <-got:
		if g != forwardMagic[1:] {
			t.Fatalf("the forward handler read %q; want the rest of the greeting", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the forward handler never got the connection")
	}
	dial("\x01vote")
	select {
	case c := <-accepted:
		b := make([]byte, 5)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "\x01vote" {
			t.Fatalf("raft read %q, %v; want its bytes from the first", b, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the raft connection never reached Accept")
	}
	select {
	case c := <-accepted:
		t.Fatalf("a second connection reached raft: %v", c.RemoteAddr())
	default:
	}
	silent := dial("")
	expectClosed(t, silent, 5*time.Second)
	waitFor(t, func() bool { return count(ref, reasonTimeout) == 1 })
}

// TestAwaitResult: a follower gets the result of an index once it applied
// it; an index whose result left the ring is an error,
// not a wrong result.
func TestAwaitResult(t *testing.T) {
	f := newFSM(site.NewState(), quietLog(), newSkippedCounter())
	n := &Node{fsm: f}
	for i := uint64(1); i <= resultRing+5; i++ {
		f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: []byte{0xff}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.awaitResult(ctx, 3); err == nil || !strings.Contains(err.Error(), "no longer kept") {
		t.Fatalf("an evicted index = %v; want an error saying so", err)
	}
	if res, err := n.awaitResult(ctx, resultRing+5); err != nil || res == nil {
		t.Fatalf("the last index = %v, %v; want its (error) result", res, err)
	}
	next := uint64(resultRing + 6)
	cmd, _ := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_MemberKey{MemberKey: &statev1.MemberKey{NodeId: "a", PublicKey: fuzzKey}}})
	go func() {
		time.Sleep(50 * time.Millisecond)
		f.Apply(&raft.Log{Index: next, Type: raft.LogCommand, Data: cmd})
	}()
	res, err := n.awaitResult(ctx, next)
	if err != nil || res != nil {
		t.Fatalf("awaited index = %v, %v; want the applied key's nil result", res, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := n.awaitResult(short, next+1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an index never applied = %v; want the deadline", err)
	}
}

// TestWriteAfterLeadershipMoves: after the leader hands over, the former
// leader forwards to the new one, and the new leader's own writes work.
func TestWriteAfterLeadershipMoves(t *testing.T) {
	ms := startCluster(t, 3)
	old, _ := leaderOf(t, ms)
	if err := old.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	waitFor(t, func() bool {
		addr, _ := old.node.raft.LeaderWithID()
		return old.node.raft.State() == raft.Follower && addr != "" && string(addr) != old.addr
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := old.store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}}); err != nil {
		t.Fatalf("write through the former leader: %v", err)
	}
	if got := listed(old.state); len(got) != 1 {
		t.Fatalf("the former leader's state right after its write: %v", got)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}
}
