package serve

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Config configures a Server. Every field is required.
type Config struct {
	// Store holds the images.
	Store Store
	// RetryAfter is the Retry-After sent with 503 for an image on its way.
	RetryAfter time.Duration
	// Logger receives the per-request logs (Debug) and the failures.
	Logger *slog.Logger
	// Metrics counts the requests and bytes.
	Metrics *Metrics
}

// Server serves one Store; Handler and Listener share it.
type Server struct {
	store      Store
	retryAfter string
	log        *slog.Logger
	m          *Metrics

	// failures limits the Error lines of responses that fail on the
	// server's side, per kind ("open": a blob that cannot be opened,
	// "size": one whose size changed): a flood of connections running the
	// process out of descriptors gets 500s, and a few lines saying so
	// with a count, not a line each. Per kind, not per image: a shortage
	// fails every image alike, and a few keys never overflow the limiter
	// (whose overflow bucket's count no line would report).
	failures *ratelimit.Keyed[string]
	now      func() time.Time
}

// failureBurst lines per kind, then one per failureEvery.
const (
	failureBurst = 3
	failureEvery = 10 * time.Second
)

// New returns a Server for cfg. It binds nothing.
func New(cfg Config) *Server {
	secs := int(max(cfg.RetryAfter.Seconds(), 1))
	return &Server{store: cfg.Store, retryAfter: strconv.Itoa(secs), log: cfg.Logger, m: cfg.Metrics,
		failures: ratelimit.NewKeyed[string](failureBurst, failureEvery, 8), now: time.Now}
}

// FlushLogs writes, for each kind of failure whose lines were held back
// since its last one, a line with their count: once its limit allows a
// line again, or all of them when final (at shutdown). Call it now and
// then, so that the count of a flood's tail is not lost.
func (s *Server) FlushLogs(final bool) {
	for kind, n := range s.failures.Drain(s.now(), final) {
		s.log.Error("imagecache: failed response lines suppressed", "kind", kind, "suppressed", n)
	}
}

// logFailure writes an Error line for a response that failed on the
// server's side, rate-limited (failures); past the limit at Debug.
func (s *Server) logFailure(ctx context.Context, log *slog.Logger, kind string, d [32]byte, msg string, args ...any) {
	level, held := s.failures.Level(kind, s.now(), slog.LevelError)
	if !log.Enabled(ctx, level) {
		return
	}
	log.Log(ctx, level, msg, append(args, "sha256", hex.EncodeToString(d[:]), held)...)
}

// Metrics are the serving counters, siteboot_cache_… for history's sake:
// the cache registers them with its own.
type Metrics struct {
	BytesServed   prometheus.Counter
	Requests      *prometheus.CounterVec
	FastResponses prometheus.Counter
	FastHandoffs  prometheus.Counter
}

// NewMetrics makes the counters; nothing is registered.
func NewMetrics() *Metrics {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "siteboot", Subsystem: "cache", Name: name, Help: help}
	}
	return &Metrics{
		BytesServed: prometheus.NewCounter(opts("bytes_served_total", "Image bytes sent in /cache responses.")),
		Requests: prometheus.NewCounterVec(opts("requests_total",
			"/cache requests by HTTP status code."), []string{"code"}),
		FastResponses: prometheus.NewCounter(opts("fast_path_responses_total",
			"/cache responses sent by the fast path, without net/http (also in requests_total).")),
		FastHandoffs: prometheus.NewCounter(opts("fast_path_handoffs_total",
			"Connections the fast path handed to net/http at a request it does not answer itself.")),
	}
}

// Collectors lists the counters for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.BytesServed, m.Requests, m.FastResponses, m.FastHandoffs}
}
