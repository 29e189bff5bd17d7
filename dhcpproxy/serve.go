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
// returns nil. Each conn has readersPerConn goroutines reading it, each
// answering what it read; that many goroutines per conn, and no more. A socket closed from outside is a clean stop of that socket;
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
	readers := readersPerConn()
	for _, c := range conns {
		for range readers {
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
			s.m.sendErrors.Inc()
			level, held := s.limits.send.Level(c.Iface, s.cfg.Now(), slog.LevelWarn)
			s.log.LogAttrs(context.Background(), level, "dhcpproxy: send reply", slog.String("iface", c.Iface),
				slog.String("to", to.String()), slog.String("err", err.Error()), held)
		}
	}
}
