package lease

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
)

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
	ms := startMembers(t, 3)
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
	return dialForwardFrom(t, nil, addr)
}

// dialForwardFrom is dialForward from a chosen local address (nil: any).
func dialForwardFrom(t *testing.T, local net.Addr, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: local}).Dial("tcp", addr)
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
	ms := startMembers(t, 3)
	leader, followers := leaderOf(t, ms)
	// The applied index moves on its own (the new holder's epoch, member
	// keys): what must not change is the site state and the epoch.
	before, err := leader.state.MarshalState()
	if err != nil {
		t.Fatal(err)
	}

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
	if after, err := leader.state.MarshalState(); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("refused forward requests changed the site state (%v)", err)
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
// connections; the next is told so and closed. The test dials from
// 127.0.0.2, an address no member uses: the followers (on 127.0.0.1) open
// and close forward connections of their own, and counted under the same
// host they made the count this test waits for move under it.
func TestForwardPerPeerLimit(t *testing.T) {
	ms := startMembers(t, 3)
	leader, _ := leaderOf(t, ms)
	const peer = "127.0.0.2"
	from := &net.TCPAddr{IP: net.ParseIP(peer)}
	fromPeer := func() int {
		leader.node.fwd.mu.Lock()
		defer leader.node.fwd.mu.Unlock()
		return leader.node.fwd.perPeer[peer]
	}
	var held []net.Conn
	for range maxForwardPerPeer {
		held = append(held, dialForwardFrom(t, from, leader.addr))
	}
	waitFor(t, func() bool { return fromPeer() == maxForwardPerPeer })
	over := dialForwardFrom(t, from, leader.addr)
	resp, err := readResponse(over)
	if err != nil || resp.status != statusFailed || !bytes.Contains([]byte(resp.message), []byte("per peer")) {
		t.Fatalf("connection past the limit: %+v, %v; want refused", resp, err)
	}
	// The held ones still serve.
	body, _ := forwardRequest{op: opApply, timeout: time.Second, payload: []byte{0xff}}.encode()
	for i, c := range held {
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
		if resp, err := readResponse(c); err != nil || resp.status != statusFailed || bytes.Contains([]byte(resp.message), []byte("per peer")) {
			t.Fatalf("held connection %d: %+v, %v; want the request refused, not the connection", i, resp, err)
		}
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, func() bool {
		leader.node.fwd.mu.Lock()
		defer leader.node.fwd.mu.Unlock()
		_, left := leader.node.fwd.perPeer[peer]
		return !left
	})
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

// TestForwardRequestMemoryFollowsTheBytesSent: a request's length is the
// peer's word only; the leader must not set aside the 6 MiB a header
// claims before any of it arrives, or a few idle connections pin memory.
func TestForwardRequestMemoryFollowsTheBytesSent(t *testing.T) {
	head := make([]byte, 9)
	head[0] = byte(opApply)
	binary.BigEndian.PutUint32(head[1:5], 1000)
	binary.BigEndian.PutUint32(head[5:9], maxForwardPayload)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readRequest(bytes.NewReader(append(head, "only a few bytes"...)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errForwardFormat) {
		t.Fatalf("readRequest of a truncated request = %v; want a forward protocol error", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("reading 16 bytes of a request claiming %d allocated %d bytes", maxForwardPayload, got)
	}
}

// TestForwardLostAnswerIsNoRefusal: once a request reached the leader, a
// lost answer (or a leader that lost leadership after appending) leaves
// the write perhaps committed: the follower says so (ErrOutcomeUnknown)
// instead of an error its callers retry, applying the write twice. A
// leader that never got the request is a plain ForwardError.
func TestForwardLostAnswerIsNoRefusal(t *testing.T) {
	ms := startMembers(t, 3)
	_, followers := leaderOf(t, ms)
	f := followers[0]
	silent := listenLoopback(t)
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			magic := make([]byte, len(forwardMagic))
			if _, err := io.ReadFull(c, magic); err == nil {
				_, _ = readRequest(c) // taken, never answered
			}
			c.Close()
		}
	}()
	unknown, reqs := fakeLeader(t, func() forwardResponse {
		return forwardResponse{status: statusUnknown, message: "lease: raft leadership was lost before it was confirmed"}
	})
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_SiteCommand{SiteCommand: []byte{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, addr := range map[string]string{"silent": silent.Addr().String(), "unknown": unknown} {
		_, err := f.node.forwardTo(ctx, addr, opApply, data)
		var fe *ForwardError
		if !errors.As(err, &fe) || !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("forward to a %s leader = %v; want a *ForwardError wrapping ErrOutcomeUnknown", name, err)
		}
	}
	if len(reqs) != 1 {
		t.Fatalf("the unknown-outcome leader got %d requests; want 1 (not sent again)", len(reqs))
	}
	closed := freeAddr(t) // nobody listens: the request never left
	if _, err := f.node.forwardTo(ctx, closed, opApply, data); errors.Is(err, ErrOutcomeUnknown) || err == nil {
		t.Fatalf("forward to an address nobody listens on = %v; want a plain failure", err)
	}
}

// TestAwaitResultIsBounded: a caller without a deadline (a gRPC client that
// set none) does not wait forever for an index this follower never applies
// (cut off from the leader, or removed): applyTimeout bounds the wait.
func TestAwaitResultIsBounded(t *testing.T) {
	n := &Node{fsm: newFSM(site.NewState(), quietLog(), newSkippedCounter())}
	done := make(chan error, 1)
	go func() {
		_, err := n.awaitResult(context.Background(), 42)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "committed the write at index 42") {
			t.Fatalf("awaitResult of an index never applied = %v; want the deadline, naming the index", err)
		}
	case <-time.After(applyTimeout + 5*time.Second):
		t.Fatalf("awaitResult without a deadline still waiting after %s", applyTimeout+5*time.Second)
	}
}
