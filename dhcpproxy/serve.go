package dhcpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"golang.org/x/sync/errgroup"
)

// maxPacket is larger than any DHCP packet on a 1500-byte (or 9000-byte)
// link; longer datagrams are truncated and then fail to decode.
const maxPacket = 9000

// Serve answers packets on conns until ctx ends, then closes them and
// returns nil. An IPv4 UDP socket has one goroutine reading it in batches
// (serveBatches); any other conn has readersPerConn goroutines reading it,
// each answering what it read; that many goroutines per conn, and no more. A socket closed from outside is a clean stop of that socket;
// Serve returns once all have stopped. Any other read error stops every
// conn and is returned. Serve owns conns: they are closed when it returns.
func (s *Server) Serve(ctx context.Context, conns ...*Conn) error {
	if len(conns) == 0 {
		return errors.New("dhcpproxy: serve: no sockets")
	}
	// The periodic count of decision lines held back by the log limits,
	// and a last one when Serve returns.
	sctx, endSummaries := context.WithCancel(ctx)
	summaries := make(chan struct{})
	go func() {
		defer close(summaries)
		s.limits.stages.RunSummaries(sctx, s.log, "dhcpproxy: log lines suppressed")
	}()
	defer func() { endSummaries(); <-summaries }()
	s.drops.serve(conns)
	closeConns := func() { s.drops.retire(conns); closeAll(conns) }
	g, gctx := errgroup.WithContext(ctx)
	stop := context.AfterFunc(gctx, closeConns)
	defer stop()
	for _, c := range conns {
		if b := newBatchIO(c); b != nil {
			g.Go(func() error { return s.serveBatches(c, b) })
			continue
		}
		for range readersPerConn() {
			g.Go(func() error { return s.serveConn(c) })
		}
	}
	err := g.Wait()
	closeConns()
	return err
}

// serveConn reads, decides and writes, one packet at a time; no lock is
// held across the socket calls. Several run on one conn at once, each
// with its own buffers.
func (s *Server) serveConn(c *Conn) error {
	r := newPacketReader(c)
	for {
		pkt, in, err := r.read()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dhcpproxy: read on %s port %d: %w", c.Iface, c.Port, err)
		}
		reply, to, ok := s.Handle(pkt, in)
		if !ok {
			continue
		}
		if _, err := c.PacketConn.WriteTo(reply, to); err != nil {
			s.sendFailed(c, to, err)
		}
	}
}

// serveBatches is serveConn with batchIO: it reads what the socket holds,
// up to batchSize datagrams, decides each, and sends the replies together.
// One runs per socket: while it decides, the next datagrams queue in the
// socket's receive buffer and its next read takes them all at once. A
// second reader on the same socket would instead wake for each datagram
// as it arrives and read them one by one: with four, a closed-loop load
// got 41,600-43,000 offers/s at 20 µs of CPU each, with one 50,600-56,200
// at 15 µs (BENCHMARKS.md, section E, "Batches").
func (s *Server) serveBatches(c *Conn, b *batchIO) error {
	var dests [batchSize]*net.UDPAddr
	failed := func(i int, err error) { s.sendFailed(c, dests[i], err) }
	for {
		n, err := b.read()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dhcpproxy: read on %s port %d: %w", c.Iface, c.Port, err)
		}
		for i := range n {
			pkt, in := b.packet(i, c)
			reply, to, ok := s.Handle(pkt, in)
			if !ok {
				continue
			}
			dests[b.queued] = to
			if !b.queue(reply, to) {
				s.sendFailed(c, to, errors.New("not an IPv4 destination"))
			}
		}
		err = b.send(failed)
		clear(dests[:])
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dhcpproxy: send on %s port %d: %w", c.Iface, c.Port, err)
		}
	}
}

// sendFailed counts and logs (within the send log limit) a reply the
// socket did not take.
func (s *Server) sendFailed(c *Conn, to *net.UDPAddr, err error) {
	s.m.sendErrors.Inc()
	level, held := s.limits.send.Level(c.Iface, s.cfg.Now(), slog.LevelWarn)
	if !s.log.Enabled(context.Background(), level) {
		return // a flood of drops builds no line nobody writes
	}
	s.log.LogAttrs(context.Background(), level, "dhcpproxy: send reply", slog.String("iface", c.Iface),
		slog.String("to", to.String()), slog.String("err", err.Error()), held)
}
