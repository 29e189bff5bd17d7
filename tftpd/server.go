package tftpd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Server is a read-only TFTP server of a Files set.
type Server struct {
	cfg    Config
	log    *slog.Logger
	lim    *limitedLog
	stages *ratelimit.Stages // transfer and refusal lines, per client, file and result
	m      *metrics
	admit  *admission
	ifaces *ifaceCache
	now    func() time.Time

	// Refusals (ERROR packets to requests that start no transfer) sent
	// per source address: an ERROR is larger than the smallest request
	// that earns one, and goes to whatever source the request names.
	errPerSource *ratelimit.Keyed[netip.Addr]
}

// Refusal budget: errSourceBurst ERRORs to one address, then one per
// errSourceEvery, for errSourceMax addresses at a time (those beyond share
// one more such budget). An ERROR goes to whatever source a request
// names, so without it a forger could aim a stream of them at any host.
// A client refused that way gets no answer and gives up at its timeout,
// as if the ERROR were lost. The burst holds the dozen names PXELINUX or
// GRUB try one after another, each expecting "file not found" at once.
// There is no budget for all sources together: forged requests from many
// addresses would spend it and silence every machine's refusals.
const (
	errSourceBurst = 16
	errSourceEvery = time.Second / 4
	errSourceMax   = 4096
)

// flushEvery is how often suppressed log counts are reported once their
// bucket refills.
const flushEvery = time.Second

// New checks cfg, fills in defaults and registers the metrics. It binds
// nothing.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("tftpd: metrics: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, m: m, now: time.Now,
		admit: newAdmission(cfg.MaxTransfers, cfg.MaxPerSource, preemptGrace)}
	s.lim = newLimitedLog(s.log, s.now, func(string) { m.suppressed.Inc() })
	s.stages = ratelimit.NewStages(func(string) { m.suppressed.Inc() })
	s.ifaces = newIfaceCache(s.now)
	s.errPerSource = ratelimit.NewKeyed[netip.Addr](errSourceBurst, errSourceEvery, errSourceMax)
	return s, nil
}

// Serve answers TFTP requests arriving on conn, which must be a
// *net.UDPConn (the arrival address and interface of each request are
// read from it). It returns nil when ctx ends or conn is closed, after
// in-flight transfers stopped: a transfer stops at its next block once
// ctx ends, or after at most Timeout×Retries when its client has gone
// quiet. Serve closes conn. Hand conn over as soon as it is bound: a
// request queued before Serve asks the kernel for its arrival interface
// is granted 512-byte blocks.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	udp, ok := conn.(*net.UDPConn)
	if !ok {
		return fmt.Errorf("tftpd: serve: conn is a %T, want a *net.UDPConn", conn)
	}
	setOptions(udp) // refusals
	l := newListener(udp)
	s.log.Info("tftp serving", "addr", udp.LocalAddr().String(), "max_blksize", s.cfg.MaxBlockSize,
		"max_windowsize", s.cfg.MaxWindowSize, "max_transfers", s.cfg.MaxTransfers, "max_per_source", s.cfg.MaxPerSource)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(ctx, udp, stop)
	}()
	var transfers sync.WaitGroup
	s.loop(ctx, l, &transfers)
	close(stop)
	<-watched
	_ = udp.Close()
	transfers.Wait()
	s.lim.flush(true)
	s.stages.SummaryLine(s.log, "tftp: log lines suppressed")
	return nil
}

// watch closes conn when ctx ends (which ends the read loop) and reports
// suppressed log lines, until stop is closed.
func (s *Server) watch(ctx context.Context, conn *net.UDPConn, stop <-chan struct{}) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			_ = conn.Close()
			return
		case <-t.C:
			s.lim.flush(false)
			s.stages.SummaryDue(s.log, "tftp: log lines suppressed", s.now())
		}
	}
}

// loop reads requests until the socket is closed. It never blocks on a
// transfer: each admitted one runs in its own goroutine, and there are at
// most MaxTransfers of those.
func (s *Server) loop(ctx context.Context, l *listener, transfers *sync.WaitGroup) {
	buf := make([]byte, maxRequest+1)
	for {
		d, err := l.read(buf)
		if errors.Is(err, net.ErrClosed) {
			if ctx.Err() == nil {
				s.log.Info("tftp socket closed")
			}
			return
		}
		if err != nil {
			s.logDrop(s.log, slog.LevelWarn, "read_error", "tftp read failed", "err", describe(err))
			pause(ctx, 10*time.Millisecond) // an error that repeats must not spin
			continue
		}
		s.handle(ctx.Done(), l, d, buf[:d.n], transfers)
	}
}

// handle decides what one datagram on the listening port gets: an ERROR
// right away (write request, bad name), nothing (malformed, duplicate,
// over a bound), or a transfer of its own.
func (s *Server) handle(done <-chan struct{}, l *listener, d datagram, p []byte, transfers *sync.WaitGroup) {
	if !s.hostSource(d) {
		// Whatever went back, an ERROR or a whole transfer, would reach
		// every host of the link, the one that forged it among them.
		s.drop(s.log, slog.LevelDebug, dropNotHost, "remote", d.client.String())
		return
	}
	req, err := parseRequest(p)
	if err != nil {
		op := -1
		if len(p) >= 2 {
			op = int(binary.BigEndian.Uint16(p))
		}
		s.drop(s.log, slog.LevelDebug, dropMalformed, "remote", d.client.String(), "op", op, "len", len(p))
		return
	}
	log := s.log.With("remote", d.client.String(), "file", logName(req.name))
	if req.op == opWRQ {
		s.refuse(l, d, req.name, log, "write", resultRefused, errWrite, errWrite)
		return
	}
	name, err := requestName(req.name)
	if err != nil {
		s.refuse(l, d, req.name, log, "read", resultRefused, err, errAccess)
		return
	}
	t, victim, why := s.admit.admit(transferKey{client: d.client, file: req.name}, s.now())
	if why != "" {
		s.drop(log, slog.LevelDebug, why, "running", s.admit.count())
		return
	}
	if victim != nil {
		s.preempt(victim, d)
	}
	s.m.active.Inc()
	transfers.Add(1)
	go func() {
		defer transfers.Done()
		defer s.m.active.Dec()
		defer s.admit.release(t)
		s.serveRead(done, l, d, log, t, req, name)
	}()
}

// preempt ends the unconfirmed transfer that gave its place to the
// request d: closing its socket fails its pending read or next send, so
// its goroutine returns and closes its file (Close waits only until the
// read it wakes has returned, never for the client). Its client gets no
// ERROR: a forged source needs none, and a real one that lost a packet
// retries its request rather than giving up the boot.
func (s *Server) preempt(p *preemption, d datagram) {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	s.drop(s.log, slog.LevelDebug, dropPreempted, "remote", p.key.client.String(), "file", p.key.file,
		"age", p.age.Round(time.Millisecond), "for", d.client.String())
}

// refuse answers a request with an ERROR from the listening socket and
// logs and counts it. err is logged, tell is sent. Past the refusal
// budget the ERROR is not sent, and the request is counted as a drop
// (error_limit) instead, at Debug.
func (s *Server) refuse(l *listener, d datagram, file string, log *slog.Logger, op, result string, err, tell error) {
	if ok, _ := s.errPerSource.Allow(d.client.Addr(), s.now()); !ok {
		s.drop(log, slog.LevelDebug, dropErrorLimit, "op", op, "result", result, "err", err)
		return
	}
	s.m.transfers.WithLabelValues(result).Inc()
	s.logResult(log, d.client, logName(file), slog.LevelInfo, result, "op", op, "result", result, "err", err)
	if werr := l.reply(errorPacket(tell.Error()), d); werr != nil && !errors.Is(werr, net.ErrClosed) {
		s.logDrop(log, slog.LevelWarn, "reply_error", "tftp reply failed", "err", describe(werr))
	}
}

// drop counts and logs a request left unanswered.
func (s *Server) drop(log *slog.Logger, level slog.Level, reason string, attrs ...any) {
	s.m.dropped.WithLabelValues(reason).Inc()
	s.logDrop(log, level, reason, "tftp request dropped", append(attrs, "reason", reason)...)
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// datagram is a packet read from the listening socket.
type datagram struct {
	n       int
	client  netip.AddrPort
	src     *net.UDPAddr
	dst     net.IP // the address it was sent to, nil if unknown
	ifIndex int    // the interface it arrived on, 0 if unknown
}
