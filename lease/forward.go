package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// Bounds on the forward side of the raft port, within the stream layer's
// own (maxPeerConns, handshakeTimeout): forwarded writes can never take
// all of raft's connections.
const (
	maxForwardConns   = 16
	maxForwardPerPeer = 4
	// forwardIdle is how long a forward connection may wait for its next
	// request.
	forwardIdle = 30 * time.Second
)

// ForwardError is a write this follower could not hand to the leader: the
// leader is unreachable, or it failed the write.
type ForwardError struct {
	Leader string // the leader's raft address
	Err    error
}

func (e *ForwardError) Error() string {
	msg := "lease: forwarding the write to the leader " + e.Leader + " failed"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ForwardError) Unwrap() error { return e.Err }

// forwarder serves forwarded writes on the leader and sends them from a
// follower.
type forwarder struct {
	stream  *streamLayer  // nil: an in-memory transport, nothing to forward to
	started chan struct{} // closed once raft runs

	mu      sync.Mutex
	total   int
	perPeer map[string]int
}

func newForwarder() *forwarder {
	return &forwarder{started: make(chan struct{}), perPeer: map[string]int{}}
}

func (f *forwarder) admit(remote net.Addr) (release func(), err error) {
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total >= maxForwardConns || f.perPeer[host] >= maxForwardPerPeer {
		return nil, fmt.Errorf("%d forward connections open (%d from %s); the limits are %d and %d per peer",
			f.total, f.perPeer[host], host, maxForwardConns, maxForwardPerPeer)
	}
	f.total++
	f.perPeer[host]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.total--
		if f.perPeer[host]--; f.perPeer[host] == 0 {
			delete(f.perPeer, host)
		}
	}, nil
}

// serveForward serves one forward connection whose first byte the stream
// layer read: the rest of the magic, then one request at a time until the
// peer closes, goes idle or sends something malformed.
func (n *Node) serveForward(ctx context.Context, c net.Conn) {
	log := n.log.With("remote", c.RemoteAddr().String())
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	magic := make([]byte, len(forwardMagic)-1)
	if _, err := io.ReadFull(c, magic); err != nil || string(magic) != forwardMagic[1:] {
		log.Debug("lease: forward connection without the protocol's opening; closed")
		return
	}
	release, err := n.fwd.admit(c.RemoteAddr())
	if err != nil {
		log.Debug("lease: forward connection refused", "err", err)
		_, _ = c.Write(forwardResponse{status: statusFailed, message: err.Error()}.encode())
		return
	}
	defer release()
	select {
	case <-n.fwd.started:
	case <-ctx.Done():
		return
	}
	for {
		_ = c.SetDeadline(time.Now().Add(forwardIdle))
		req, err := readRequest(c)
		if err != nil {
			if errors.Is(err, errForwardFormat) {
				log.Debug("lease: malformed forward request; closed", "err", err)
				_, _ = c.Write(forwardResponse{status: statusFailed, message: err.Error()}.encode())
			}
			return
		}
		_ = c.SetDeadline(time.Now().Add(req.timeout + handshakeTimeout))
		rctx, cancel := context.WithTimeout(ctx, req.timeout)
		resp := n.handleForward(rctx, req)
		cancel()
		log.Debug("lease: forwarded request served", "op", req.op, "bytes", len(req.payload), "status", resp.status, "index", resp.index)
		if _, err := c.Write(resp.encode()); err != nil {
			return
		}
	}
}

// handleForward runs a forwarded request on this node, the leader.
func (n *Node) handleForward(ctx context.Context, req forwardRequest) forwardResponse {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	var f raft.IndexFuture
	timeout := timeoutOf(ctx)
	switch req.op {
	case opApply:
		var e statev1.LogEntry
		if err := proto.Unmarshal(req.payload, &e); err != nil {
			return failed(fmt.Errorf("lease: forwarded log entry: %w", err))
		}
		switch e.GetKind().(type) {
		case *statev1.LogEntry_SiteCommand, *statev1.LogEntry_MemberKey:
		default:
			return failed(errors.New("lease: only site commands and member keys are forwarded"))
		}
		f = n.raft.Apply(req.payload, timeout)
	case opAddVoter, opRemoveServer:
		var err error
		if f, err = n.changeMembers(req.op, string(req.payload), timeout); err != nil {
			return failed(err)
		}
	}
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return n.notLeader()
		}
		err = n.applyError(err)
		if errors.Is(err, ErrOutcomeUnknown) {
			return forwardResponse{status: statusUnknown, message: err.Error()}
		}
		return failed(err)
	}
	return forwardResponse{status: statusOK, index: f.Index()}
}

func (n *Node) notLeader() forwardResponse {
	addr, _ := n.raft.LeaderWithID()
	return forwardResponse{status: statusNotLeader, message: string(addr)}
}

func failed(err error) forwardResponse {
	return forwardResponse{status: statusFailed, message: err.Error()}
}

// timeoutOf is the time left until ctx's deadline, applyTimeout without one.
func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return applyTimeout
}

// write commits a log entry: here on the leader, through the leader from a
// follower. A follower returns its own state machine's result for the
// entry once it applied it: the state machine is deterministic, so that
// is the leader's result too.
func (n *Node) write(ctx context.Context, data []byte) (any, error) {
	f := n.raft.Apply(data, timeoutOf(ctx))
	err := f.Error()
	switch {
	case err == nil:
		return f.Response(), nil
	case !errors.Is(err, raft.ErrNotLeader) || n.fwd.stream == nil:
		// Leadership lost under way: the entry may be committed, so it
		// is not sent again.
		return nil, n.applyError(err)
	}
	index, err := n.forward(ctx, opApply, data)
	if err != nil {
		return nil, err
	}
	return n.awaitResult(ctx, index)
}

// forward sends a request to the leader and returns the log index of its
// change. A leader that is no longer one names the new leader, which is
// asked once more.
func (n *Node) forward(ctx context.Context, op forwardOp, payload []byte) (uint64, error) {
	return n.forwardTo(ctx, "", op, payload)
}

// forwardTo is forward with the first leader to ask given (empty: the one
// raft knows).
func (n *Node) forwardTo(ctx context.Context, first string, op forwardOp, payload []byte) (uint64, error) {
	hint := first
	for attempt := 0; attempt < 2; attempt++ {
		leader := hint
		if leader == "" {
			addr, _ := n.raft.LeaderWithID()
			leader = string(addr)
		}
		if leader == "" || leader == string(n.trans.LocalAddr()) {
			break
		}
		resp, sent, err := n.roundTrip(ctx, leader, forwardRequest{op: op, timeout: timeoutOf(ctx), payload: payload})
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("lease: forward to the leader %s: %w", leader, ctx.Err())
			}
			if sent {
				// The leader may have committed it before the answer was lost.
				err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
			}
			return 0, &ForwardError{Leader: leader, Err: err}
		}
		switch resp.status {
		case statusOK:
			return resp.index, nil
		case statusNotLeader:
			hint = resp.message
			continue
		case statusUnknown:
			return 0, &ForwardError{Leader: leader, Err: fmt.Errorf("%w: %s", ErrOutcomeUnknown, resp.message)}
		}
		return 0, &ForwardError{Leader: leader, Err: errors.New(resp.message)}
	}
	return 0, &NotLeaderError{Leader: hint}
}

// roundTrip dials the leader (mutual TLS when configured) and sends one
// request, all within ctx. sent reports whether the request was written,
// so that the leader may have acted on it.
func (n *Node) roundTrip(ctx context.Context, leader string, req forwardRequest) (resp forwardResponse, sent bool, err error) {
	body, err := req.encode()
	if err != nil {
		return forwardResponse{}, false, err
	}
	c, err := n.fwd.stream.Dial(raft.ServerAddress(leader), timeoutOf(ctx))
	if err != nil {
		return forwardResponse{}, false, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(timeoutOf(ctx)))
	if _, err := c.Write(append([]byte(forwardMagic), body...)); err != nil {
		return forwardResponse{}, true, err // a part may have arrived
	}
	resp, err = readResponse(c)
	return resp, true, err
}

// awaitResult waits until this node applied index and returns the state
// machine's result for it, within ctx or, without a deadline, applyTimeout.
func (n *Node) awaitResult(ctx context.Context, index uint64) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		// A follower cut off from the leader, or removed, may never apply
		// index.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, applyTimeout)
		defer cancel()
	}
	poll := time.NewTicker(100 * time.Millisecond) // a snapshot install wakes nobody
	defer poll.Stop()
	for {
		res, ok, next := n.fsm.results.get(index)
		if ok {
			return res, nil
		}
		if n.fsm.applied.Load() >= index {
			if res, ok, _ := n.fsm.results.get(index); ok {
				return res, nil
			}
			return nil, fmt.Errorf("lease: the leader committed the write at index %d, but its result is no longer kept here; read the state to see it", index)
		}
		select {
		case <-next:
		case <-poll.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("lease: the leader committed the write at index %d; waiting to apply it here: %w", index, ctx.Err())
		}
	}
}
