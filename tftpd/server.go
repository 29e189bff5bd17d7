package tftpd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// DefaultMaxBlockSize is the largest blksize granted by default: a
// 1500-byte Ethernet MTU less 20 bytes of IPv4 header, 8 of UDP and 4 of
// TFTP, so a DATA packet never needs IP fragmentation.
const DefaultMaxBlockSize = 1468

// Defaults of Config.
const (
	DefaultTimeout = time.Second
	DefaultRetries = 5
)

// Files is the set of files the server serves; *images.Set satisfies it.
type Files interface {
	// Open opens the file with exactly this name and returns its size. An
	// error matching fs.ErrNotExist is reported to the client as "file
	// not found", any other error as "access violation".
	Open(name string) (*os.File, int64, error)
}

// Config configures a Server.
type Config struct {
	// Files are the files served (required).
	Files Files
	// MaxBlockSize caps the blksize option (RFC 2348) granted to clients;
	// DefaultMaxBlockSize if zero, otherwise 513..65464. pin/tftp also caps
	// it at the arrival interface's MTU less 28 bytes, 4 more than a DATA
	// packet can carry without fragmenting: on links whose MTU is below
	// 1500, set this to the MTU less 32.
	MaxBlockSize int
	// Timeout is how long a DATA or OACK packet waits for its
	// acknowledgement before it is sent again (DefaultTimeout if zero);
	// Retries how many times it is sent in all (DefaultRetries if zero).
	Timeout time.Duration
	Retries int
	// Logger receives one line per transfer (discarded if nil).
	Logger *slog.Logger
	// Metrics registers the siteboot_tftp_* collectors (none if nil).
	Metrics prometheus.Registerer
}

// Server is a read-only TFTP server of a Files set.
type Server struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	active sync.Map // remote "ip:port" → *transfer, while its handler runs
}

// closedPoll is how often Serve checks whether its socket was closed
// under it (pin/tftp spins on a closed socket instead of returning).
const closedPoll = 100 * time.Millisecond

// New checks cfg, fills in defaults and registers the metrics. It binds
// nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Files == nil {
		return nil, errors.New("tftpd: Config.Files is required")
	}
	if cfg.MaxBlockSize == 0 {
		cfg.MaxBlockSize = DefaultMaxBlockSize
	}
	if cfg.MaxBlockSize <= 512 || cfg.MaxBlockSize > 65464 {
		return nil, fmt.Errorf("tftpd: MaxBlockSize %d is outside 513..65464 (512 is what clients get without asking)", cfg.MaxBlockSize)
	}
	if cfg.Timeout < 0 || cfg.Retries < 0 {
		return nil, errors.New("tftpd: Timeout and Retries must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("tftpd: metrics: %w", err)
	}
	return &Server{cfg: cfg, log: log, m: m}, nil
}

// Serve answers TFTP requests arriving on conn, which must be a
// *net.UDPConn (pin/tftp reads the arrival interface from it). It returns
// nil when ctx ends or conn is closed, after in-flight transfers stopped:
// a transfer stops at its next block once ctx ends, or after at most
// Timeout×Retries when its client has gone quiet. Serve closes conn.
// Hand conn over as soon as it is bound: a request queued before Serve
// asks the kernel for its arrival interface is granted 512-byte blocks.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	udp, ok := conn.(*net.UDPConn)
	if !ok {
		return fmt.Errorf("tftpd: serve: conn is a %T, want a *net.UDPConn", conn)
	}
	enablePacketInfo(udp)
	lib := tftp.NewServer(s.readHandler(ctx.Done()), s.writeHandler)
	lib.SetBlockSize(s.cfg.MaxBlockSize)
	lib.SetTimeout(s.cfg.Timeout)
	lib.SetRetries(s.cfg.Retries)
	lib.SetBackoff(func(int) time.Duration { return 0 }) // the timeout is the wait
	lib.SetHook(hook{s})
	s.log.Info("tftp serving", "addr", udp.LocalAddr().String(), "max_blksize", s.cfg.MaxBlockSize)

	errc := make(chan error, 1)
	go func() { errc <- lib.Serve(udp) }()
	stop, closed := make(chan struct{}), make(chan struct{})
	go watchClosed(udp, stop, closed)
	defer close(stop)
	select {
	case <-ctx.Done():
	case <-closed:
		s.log.Info("tftp socket closed")
	case err := <-errc:
		_ = udp.Close()
		return fmt.Errorf("tftpd: serve: %w", err)
	}
	lib.Shutdown()
	<-errc
	_ = udp.Close()
	return nil
}

// enablePacketInfo asks for the destination address and interface of each
// datagram now, before pin/tftp's goroutine does: a request queued
// without them is served with 512-byte blocks only. Failure is left to
// pin/tftp, which falls back the same way.
func enablePacketInfo(conn *net.UDPConn) {
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		_ = ipv6.NewPacketConn(conn).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
		return
	}
	_ = ipv4.NewPacketConn(conn).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
}

// watchClosed closes closed once conn is closed, polling every closedPoll
// until stop is closed.
func watchClosed(conn *net.UDPConn, stop <-chan struct{}, closed chan<- struct{}) {
	t := time.NewTicker(closedPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		rc, err := conn.SyscallConn()
		if err == nil {
			err = rc.Control(func(uintptr) {})
		}
		if errors.Is(err, net.ErrClosed) {
			close(closed)
			return
		}
	}
}
