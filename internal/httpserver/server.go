package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// bulkLoopCount is how many bulk loops a Server has: one per processor
// the runtime chose at start, that is one per CPU (or per CPU of the
// container's quota), or GOMAXPROCS when the environment sets it. It is read before main runs, so a program that
// raises GOMAXPROCS afterwards, as siteboot serve does, does not raise it:
// more loops than CPUs would only compete for them.
var bulkLoopCount = runtime.GOMAXPROCS(0)

// Defaults for Config's zero values.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	// DefaultProgressTimeout is twice iPXE's own timeout for a command
	// that makes no progress (15 s): a client is cut off only after it
	// would have given up itself.
	DefaultProgressTimeout = 30 * time.Second
	// DefaultMaxConnections fits a boot storm of a few thousand machines,
	// each holding one keep-alive connection; it is lowered to what the
	// file-descriptor limit allows (see defaultMaxConnections).
	DefaultMaxConnections = 4096
	// maxHeaderBytes bounds a request head: iPXE and curl send a few
	// hundred bytes.
	maxHeaderBytes = 64 << 10
	// reservedFDs are the descriptors kept for the rest of the appliance
	// (raft, the admin API, DHCP and TFTP sockets, the cache's pulls).
	reservedFDs = 1024
)

// Config configures a Server. Zero values take the defaults.
type Config struct {
	// ReadHeaderTimeout bounds the read of a request head.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a connection.
	IdleTimeout time.Duration
	// ProgressTimeout aborts a response whose client accepts no byte for
	// this long.
	ProgressTimeout time.Duration
	// MaxConnections caps the open connections; 0 is DefaultMaxConnections
	// or, when the file-descriptor limit is lower, what it allows: two
	// descriptors per connection (the socket and the file a response
	// reads) after 1,024 kept for the rest.
	MaxConnections int
	// MaxPerSource caps the open connections from one client address (an
	// IPv6 /64), so that one address cannot take every place and keep the
	// others on 503; 0 is MaxConnections/8, at least 64 (512 at the
	// default cap). A machine that boots holds one to three; a NAT or a
	// proxy in front of many machines needs more.
	MaxPerSource int
	// UnsentBudget bounds the bytes all connections together hold in
	// their sockets unsent, shared among the open ones (each between 128
	// KiB and 4 MiB): 0 is a quarter of the kernel's TCP memory pressure
	// threshold (unsentBudget).
	UnsentBudget int64
	// Logger receives the server's logs (default: discarded).
	Logger *slog.Logger
	// Metrics registers siteboot_http_… when set.
	Metrics prometheus.Registerer
}

// Server holds the limits and the counters of one HTTP listener.
type Server struct {
	cfg  Config
	log  *slog.Logger
	base time.Time // the zero of the connections' monotonic clocks

	open        atomic.Int64 // connections accepted and not yet closed
	unsent      int64        // bytes all connections together may hold unsent (lowatFor)
	bulk        *bulkLoops   // the loops that send large bodies (bulk.go)
	refused     prometheus.Counter
	stalled     prometheus.Counter
	refusalLog  [2]refusalLog // refusals over MaxConnections [0] and MaxPerSource [1]
	refusedFrom prometheus.Counter

	srcMu    sync.Mutex
	bySource map[netip.Addr]int // open connections per client address; at most MaxConnections keys
}

// New checks cfg and registers the metrics. It binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.ReadHeaderTimeout < 0 || cfg.IdleTimeout < 0 || cfg.ProgressTimeout < 0 || cfg.MaxConnections < 0 || cfg.MaxPerSource < 0 || cfg.UnsentBudget < 0 {
		return nil, errors.New("httpserver: config: timeouts, MaxConnections, MaxPerSource and UnsentBudget must not be negative")
	}
	setDefault(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	setDefault(&cfg.ProgressTimeout, DefaultProgressTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	limit := fdLimit()
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = defaultMaxConnections(limit)
	} else if need := 2*int64(cfg.MaxConnections) + reservedFDs; limit > 0 && need > limit {
		cfg.Logger.Warn("httpserver: max connections need more file descriptors than the limit",
			"max_connections", cfg.MaxConnections, "descriptors", need, "limit", limit)
	}
	if cfg.MaxPerSource == 0 {
		cfg.MaxPerSource = max(cfg.MaxConnections/8, 64)
	}
	if cfg.UnsentBudget == 0 {
		tcpMem, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
		cfg.UnsentBudget = unsentBudget(string(tcpMem))
	}
	s := &Server{cfg: cfg, log: cfg.Logger, base: time.Now(), unsent: cfg.UnsentBudget,
		bulk: newBulkLoops(bulkLoopCount, cfg.ProgressTimeout), bySource: map[netip.Addr]int{}}
	for i := range s.refusalLog {
		s.refusalLog[i].last.Store(-int64(refusalWarnEvery))
	}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "siteboot", Subsystem: "http", Name: name, Help: help}
	}
	s.refused = prometheus.NewCounter(opts("connections_refused_total",
		"Connections closed at accept because max connections were open, in all or from the client's address."))
	s.refusedFrom = prometheus.NewCounter(opts("connections_refused_per_source_total",
		"Connections closed at accept because max connections per source were open from the client's address (also in connections_refused_total)."))
	s.stalled = prometheus.NewCounter(opts("stalled_responses_total",
		"Responses aborted because the client accepted no byte for the progress timeout."))
	if cfg.Metrics != nil {
		open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "siteboot", Subsystem: "http", Name: "connections",
			Help: "Open HTTP connections."}, func() float64 { return float64(s.open.Load()) })
		for _, c := range []prometheus.Collector{s.refused, s.refusedFrom, s.stalled, open} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("httpserver: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

func setDefault(v *time.Duration, def time.Duration) {
	if *v == 0 {
		*v = def
	}
}

// fdLimit is the process's file-descriptor limit, 0 when unknown. Go
// raises the soft limit to the hard one at start.
func fdLimit() int64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<40 {
		return 0
	}
	return int64(rl.Cur)
}

// defaultMaxConnections is DefaultMaxConnections, or what limit descriptors
// allow at two per connection after reservedFDs, but never below 64.
func defaultMaxConnections(limit int64) int {
	if limit == 0 {
		return DefaultMaxConnections
	}
	return int(max(64, min(DefaultMaxConnections, (limit-reservedFDs)/2)))
}

// boundBody gives a request that announces a body ReadHeaderTimeout more
// to send it, and closes its connection after the answer. No handler here
// reads a body, but net/http reads up to 256 KiB of an unread one before it
// sends the answer's head and again after the handler, with no deadline of
// its own: a client that announced a body and sent none would hold its
// connection, and what the handler holds open, for ever.
func boundBody(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// Bounds of one connection's share of the unsent budget: below the
// lowest, every share is a few TCP segments and each wakeup moves little;
// above the highest, a socket would hold more than the kernel's own
// default send buffer.
const (
	minLowat = 128 << 10
	maxLowat = 4 << 20
)

// unsentBudget is what all connections together may hold unsent: a
// quarter of the kernel's TCP memory pressure threshold (tcp_mem's middle
// value, in pages), so that sockets' send queues alone never bring the
// host into pressure, whatever its memory (the threshold is 6 % of RAM by
// default: 1.5 GiB on a 24 GiB host, 120 MiB on a 2 GiB appliance);
// 256 MiB when the kernel does not say.
func unsentBudget(tcpMem string) int64 {
	var low, pressure, high int64
	if n, _ := fmt.Sscan(tcpMem, &low, &pressure, &high); n != 3 || pressure <= 0 {
		return 256 << 20
	}
	return pressure * int64(os.Getpagesize()) / 4
}

// lowatFor is one connection's share of the unsent budget, rounded down
// to a power of two (so that it changes, and costs a setsockopt, only
// when the number of connections doubles or halves) within
// [minLowat, maxLowat].
func (s *Server) lowatFor() int {
	share := s.unsent / max(s.open.Load(), 1)
	if share >= maxLowat {
		return maxLowat
	}
	if share <= minLowat {
		return minLowat
	}
	return 1 << (bits.Len64(uint64(share)) - 1)
}

// MaxConnections is the cap in force, defaults applied.
func (s *Server) MaxConnections() int { return s.cfg.MaxConnections }

// MaxPerSource is the per-address cap in force, defaults applied.
func (s *Server) MaxPerSource() int { return s.cfg.MaxPerSource }

// takeSource counts one more connection from a, unless MaxPerSource are
// open from it. The invalid address (a connection that is not TCP) is
// not counted.
func (s *Server) takeSource(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	if s.bySource[a] >= s.cfg.MaxPerSource {
		return false
	}
	s.bySource[a]++
	return true
}

// releaseSource counts one connection from a less.
func (s *Server) releaseSource(a netip.Addr) {
	if !a.IsValid() {
		return
	}
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	if s.bySource[a] <= 1 {
		delete(s.bySource, a)
		return
	}
	s.bySource[a]--
}

// sourceOf is what MaxPerSource counts c against: its client's IPv4
// address, or the /64 of its IPv6 address (one host gets a whole /64 by
// SLAAC and picks addresses in it at will); invalid when c is not TCP.
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return sourceKey(a.AddrPort().Addr())
	}
	return netip.Addr{}
}

func sourceKey(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// Listener wraps ln: it accepts at most MaxConnections connections at a
// time and puts the progress deadline on each. Hand it to Serve, or to the
// image cache's fast path and that to Serve.
func (s *Server) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, s: s} }

// Serve serves h on ln (Listener's, possibly wrapped) until ctx ends, then
// shuts down gracefully: the server, then ln when it has connections of
// its own to wait for (a Shutdown method, as the fast path has).
func (s *Server) Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           boundBody(h, s.cfg.ReadHeaderTimeout),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if sh, ok := ln.(interface{ Shutdown(context.Context) error }); ok {
			_ = sh.Shutdown(sctx)
		}
	}()
	s.log.Info("http listening", "addr", ln.Addr().String(), "max_connections", s.cfg.MaxConnections, "max_per_source", s.cfg.MaxPerSource,
		"progress_timeout", s.cfg.ProgressTimeout, "unsent_budget", s.cfg.UnsentBudget)
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return fmt.Errorf("http: %w", err)
}
