package tftpd

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/internal/sockprio"
)

// What clients are told. Every ERROR carries code 1 (see errorPacket), so
// the message says what happened.
var (
	errNotFound   = errors.New("file not found")
	errAccess     = errors.New("access violation")
	errWrite      = errors.New("access violation: this server is read-only")
	errStopping   = errors.New("server shutting down")
	errReadSource = errors.New("reading the boot file failed")
)

// serveRead runs one admitted read request to its end: open the file,
// open the transfer's own socket, negotiate, send, log.
func (s *Server) serveRead(done <-chan struct{}, l *listener, d datagram, log *slog.Logger, t *transfer, req rqPacket, name string) {
	start := s.now()
	f, size, err := s.cfg.Files.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.refuse(l, d, req.name, log, "read", resultNotFound, err, errNotFound)
		return
	case fdExhausted(err):
		s.drop(log, slog.LevelWarn, dropNoResources, "during", "open file", "err", describe(err))
		return
	case err != nil:
		s.refuse(l, d, req.name, log, "read", resultRefused, err, errAccess)
		return
	}
	defer f.Close()
	conn, err := net.ListenUDP(transferNetwork(d.src), &net.UDPAddr{IP: replySource(d.dst), Zone: s.zone(d)})
	if err != nil {
		s.drop(log, slog.LevelWarn, dropNoResources, "during", "open socket", "err", describe(err))
		return
	}
	defer conn.Close()
	setOptions(conn)
	if !s.admit.attach(t, conn) {
		return // preempted while opening; counted and logged then
	}
	blksize, window, oack := req.negotiate(s.blockLimit(d), s.cfg.MaxWindowSize, size)
	x := &sender{conn: conn, to: d.src, timeout: s.cfg.Timeout, retries: s.cfg.Retries, blksize: blksize,
		window: window, confirm: func() { s.admit.confirm(t) }, gso: newGSO(conn, d.src), io: newUDPIO(conn, d.src)}
	if x.gso != nil {
		x.gso.io = x.io
	}
	if limit := timeLimit(s.cfg.Timeout, s.cfg.Retries, size, req.netascii()); limit > 0 {
		x.end = time.Now().Add(limit)
	}
	var src io.Reader = f
	if req.netascii() {
		src = netasciiReader(f)
	} else {
		x.size, x.sized = size, true
		if rc, err := f.SyscallConn(); err == nil {
			x.readv = newFileVec(rc, window).read
		}
	}
	n, err := x.run(done, src, oack)
	if s.admit.wasPreempted(t) {
		return // its socket was closed under it; counted and logged then
	}
	s.finish(log, d.client, req, x, start, n, size, err)
}

// timeLimit is the longest a transfer of a size-byte file may run, in
// Timeouts: one for each of Retries sends that get no answer, then 60, or
// one per 8 KiB of the file if that is more (at the default 1 s: 65 s for
// any first stage up to 480 KiB, 2 min for a 1 MB one, an hour for
// 30 MB); 0 (none) past what a Duration holds. The client's options do
// not move it (a netascii file counts double, what it may grow to). A LAN
// client moves a first stage in well under a second, and a boot storm's
// slowest in a few. Without a limit a client that acknowledges one block
// just before each Timeout × Retries runs out holds its place for about
// five seconds a block: a day and more for a 30 MB file.
func timeLimit(timeout time.Duration, retries int, size int64, netascii bool) time.Duration {
	if timeout <= 0 || retries < 0 || size < 0 || size > math.MaxInt64/2 {
		return 0
	}
	if netascii {
		size *= 2
	}
	n := max(limitFloor, size/limitPerTimeout)
	if int64(retries) > math.MaxInt64-n {
		return 0
	}
	n += int64(retries)
	if n > math.MaxInt64/int64(timeout) {
		return 0
	}
	return time.Duration(n) * timeout
}

// limitFloor and limitPerTimeout set timeLimit: at least limitFloor
// Timeouts, and one per limitPerTimeout bytes.
const (
	limitFloor      = 60
	limitPerTimeout = 8 << 10
)

// setOptions has conn's datagrams sent ahead of the host's bulk streams
// (internal/sockprio): a transfer is lock-step or windowed, and every
// block that waits in a queue behind kernels and initrds delays the whole
// first stage. It also clears SO_BROADCAST, which Go sets on every UDP
// socket: a TFTP answer goes to one host, and the kernel then refuses
// (EACCES) one addressed to a local broadcast address (hostSource).
// A socket without these options still works.
func setOptions(conn *net.UDPConn) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	v6 := conn.LocalAddr().(*net.UDPAddr).IP.To4() == nil
	_ = rc.Control(func(fd uintptr) {
		_ = sockprio.Set(int(fd), v6, sockprio.LowDelay)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 0)
	})
}

// blockLimit is the largest blksize for a request that arrived as d:
// MaxBlockSize, capped at the arrival interface's MTU less the IP, UDP and
// TFTP headers; 512 when the interface is unknown.
func (s *Server) blockLimit(d datagram) int {
	ifi, ok := s.ifaces.get(d.ifIndex)
	if !ok {
		return minBlockSize
	}
	overhead := 20 + 8 + 4
	if d.src.IP.To4() == nil {
		overhead = 40 + 8 + 4
	}
	return max(minBlockSize, min(s.cfg.MaxBlockSize, ifi.mtu-overhead))
}

// zone is the interface name an IPv6 link-local reply address needs.
func (s *Server) zone(d datagram) string {
	if d.dst == nil || d.dst.To4() != nil || !d.dst.IsLinkLocalUnicast() {
		return ""
	}
	ifi, _ := s.ifaces.get(d.ifIndex)
	return ifi.name
}

// finish logs and counts a transfer that was started.
func (s *Server) finish(log *slog.Logger, client netip.AddrPort, req rqPacket, x *sender, start time.Time, n, size int64, err error) {
	d := s.now().Sub(start)
	result := classify(err)
	s.m.transfers.WithLabelValues(result).Inc()
	s.m.bytes.Add(float64(n))
	if result == resultOK {
		s.m.seconds.Observe(d.Seconds())
	}
	attrs := []any{"op", "read", "bytes", n, "size", size, "blksize", x.blksize,
		"windowsize", x.window, "duration", d.Round(time.Microsecond), "result", result, "mode", req.mode,
		"datagrams", x.sent, "acked", x.acked}
	if err != nil {
		attrs = append(attrs, "err", describe(err))
	}
	if x.cause != nil {
		attrs = append(attrs, "cause", x.cause)
	}
	level := slog.LevelInfo
	if result == resultTimeout || result == resultError {
		level = slog.LevelWarn
	}
	s.logResult(log, client, req.name, level, result, attrs...)
}

// classify maps the error of a started transfer to its result label.
func classify(err error) string {
	var ne net.Error
	var ce *clientError
	switch {
	case err == nil:
		return resultOK
	case errors.As(err, &ce):
		return resultAborted
	case errors.Is(err, errTooSlow):
		return resultTimeout
	case errors.As(err, &ne) && ne.Timeout():
		return resultTimeout
	}
	return resultError
}
