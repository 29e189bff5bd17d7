package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// loadSpec is one run's shape.
type loadSpec struct {
	Target      *net.UDPAddr  // where DISCOVERs go (255.255.255.255:67)
	Rate        float64       // requests/s; > 0 selects open-loop
	Outstanding int           // in-flight requests in closed-loop
	Duration    time.Duration // how long to issue requests
	Requests    uint64        // stop after this many (0: Duration only)
	Timeout     time.Duration // an unanswered request is lost after this
	ServerID    netip.Addr    // count only this server's offers (invalid: any)
}

type pendingReq struct {
	sent time.Time
	mac  int
	done chan struct{} // closed-loop worker to wake, or nil
}

// runner drives one run over one socket.
type runner struct {
	spec  loadSpec
	conn  net.PacketConn
	pkts  [][]byte // one DISCOVER per MAC, xid patched per send
	macs  [][6]byte
	base  uint32
	start time.Time

	seq      atomic.Uint64
	lastSend atomic.Int64 // ns since start
	mu       sync.Mutex
	pending  map[uint32]pendingReq
	lost     atomic.Uint64
	sendErr  atomic.Pointer[error]
	stopping atomic.Bool
	recv     receiverStats // written by the receiver goroutine only
	lag      histogram     // open-loop schedule lag, sender only
}

func newRunner(spec loadSpec, conn net.PacketConn, pkts [][]byte, macs [][6]byte, xidBase uint32) *runner {
	return &runner{spec: spec, conn: conn, pkts: pkts, macs: macs, base: xidBase,
		pending: make(map[uint32]pendingReq), recv: newReceiverStats()}
}

// run issues the load, waits for the last answers and returns the result.
func (r *runner) run(ctx context.Context) (Result, error) {
	r.start = time.Now()
	_ = r.conn.SetReadDeadline(time.Time{})
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); r.receive() }()
	if r.spec.Rate > 0 {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	r.stopping.Store(true)
	_ = r.conn.SetReadDeadline(time.Now())
	<-recvDone
	if p := r.sendErr.Load(); p != nil {
		return Result{}, *p
	}
	return r.result(), nil
}

// next reserves the next request number, or reports that issuing is over.
func (r *runner) next(ctx context.Context, end time.Time) (uint64, bool) {
	if ctx.Err() != nil || !time.Now().Before(end) || r.sendErr.Load() != nil {
		return 0, false
	}
	n := r.seq.Add(1) - 1
	if r.spec.Requests > 0 && n >= r.spec.Requests {
		return 0, false
	}
	return n, true
}

// sentBound is one past the last request number next has handed out
// (Requests at most): the xids base .. base+sentBound-1 are this run's.
func (r *runner) sentBound() uint64 {
	n := r.seq.Load()
	if r.spec.Requests > 0 {
		n = min(n, r.spec.Requests)
	}
	return n
}

// send registers request n and sends it; buf is the caller's scratch.
func (r *runner) send(buf []byte, n uint64, done chan struct{}) (uint32, error) {
	xid := r.base + uint32(n)
	mac := int(n % uint64(len(r.pkts)))
	pkt := append(buf[:0], r.pkts[mac]...)
	setXID(pkt, xid)
	now := time.Now()
	r.mu.Lock()
	r.pending[xid] = pendingReq{sent: now, mac: mac, done: done}
	r.mu.Unlock()
	if _, err := r.conn.WriteTo(pkt, r.spec.Target); err != nil {
		r.expire(xid)
		err = fmt.Errorf("send to %s: %w", r.spec.Target, err)
		r.sendErr.CompareAndSwap(nil, &err)
		return xid, err
	}
	r.lastSend.Store(int64(time.Since(r.start)))
	return xid, nil
}

// expire drops an unanswered request; false means an answer won the race.
func (r *runner) expire(xid uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[xid]; !ok {
		return false
	}
	delete(r.pending, xid)
	return true
}

func (r *runner) closedLoop(ctx context.Context) {
	end := r.start.Add(r.spec.Duration)
	var wg sync.WaitGroup
	for range r.spec.Outstanding {
		wg.Go(func() { r.worker(ctx, end) })
	}
	wg.Wait()
}

func (r *runner) worker(ctx context.Context, end time.Time) {
	buf := make([]byte, 0, 1500)
	done := make(chan struct{}, 1)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n, ok := r.next(ctx, end)
		if !ok {
			return
		}
		xid, err := r.send(buf, n, done)
		if err != nil {
			return
		}
		timer.Reset(r.spec.Timeout)
		select {
		case <-done:
		case <-timer.C:
			r.settle(xid, done)
		case <-ctx.Done():
			r.settle(xid, done)
			return
		}
	}
}

// settle ends a request that timed out: lost, unless its answer came just
// now, in which case the wake-up is consumed.
func (r *runner) settle(xid uint32, done chan struct{}) {
	if r.expire(xid) {
		r.lost.Add(1)
		return
	}
	<-done
}

func (r *runner) openLoop(ctx context.Context) {
	end := r.start.Add(r.spec.Duration)
	buf := make([]byte, 0, 1500)
	for i := uint64(0); ; i++ {
		due := r.start.Add(time.Duration(float64(i) * float64(time.Second) / r.spec.Rate))
		if !due.Before(end) || !sleepUntil(ctx, due) {
			break
		}
		n, ok := r.next(ctx, end.Add(time.Millisecond))
		if !ok {
			break
		}
		r.lag.record(time.Since(due))
		if _, err := r.send(buf, n, nil); err != nil {
			break
		}
	}
	r.drain(ctx)
}

// drain waits up to Timeout for outstanding answers, then counts the rest
// as lost.
func (r *runner) drain(ctx context.Context) {
	deadline := time.Now().Add(r.spec.Timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil && r.outstanding() > 0 {
		time.Sleep(time.Millisecond)
	}
	r.mu.Lock()
	r.lost.Add(uint64(len(r.pending)))
	clear(r.pending)
	r.mu.Unlock()
}

func (r *runner) outstanding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// receive reads replies until run sets stopping and unblocks the read, or
// the socket is closed.
func (r *runner) receive() {
	buf := make([]byte, 2048)
	for {
		n, from, err := r.conn.ReadFrom(buf)
		switch {
		case err == nil:
			r.handle(buf[:n], from, time.Now())
		case errors.Is(err, net.ErrClosed):
			return
		case errors.Is(err, os.ErrDeadlineExceeded) && r.stopping.Load():
			return
		default:
			r.recv.readErrors++
		}
	}
}

// handle accounts one datagram.
func (r *runner) handle(pkt []byte, from net.Addr, now time.Time) {
	rep, err := parseReply(pkt)
	if err != nil {
		r.recv.malformed++
		return
	}
	// xids run from base up, one per request sent (next counts it before
	// the send): any other is not this run's to count. It is another
	// client's on the LAN, or an answer to an earlier run on the same port
	// still on its way: a run ends at its last proxy offer, and an
	// ordinary DHCP server on the LAN may still be answering its requests.
	if uint64(rep.XID-r.base) >= r.sentBound() {
		r.recv.foreign++
		return
	}
	proxy := r.recv.account(rep, from)
	if !proxy || (r.spec.ServerID.IsValid() && rep.ServerID != r.spec.ServerID) {
		return
	}
	r.mu.Lock()
	p, ok := r.pending[rep.XID]
	match := ok && r.macs[p.mac] == rep.CHAddr
	if match {
		delete(r.pending, rep.XID)
	}
	r.mu.Unlock()
	switch {
	case !ok:
		r.recv.unmatched++
	case !match:
		r.recv.wrongMAC++
	default:
		r.recv.answered++
		r.recv.lastAnswer = now
		r.recv.hist.record(now.Sub(p.sent))
		if p.done != nil {
			p.done <- struct{}{}
		}
	}
}
