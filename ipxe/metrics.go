package ipxe

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Log limits for lines a client causes at will (unknown machines, refused
// UUIDs, bad requests): each remote address gets remoteLogBurst lines, then
// one per remoteLogEvery; the next line it gets says how many were held
// back. Held-back lines go to Debug.
const (
	remoteLogBurst = 10
	remoteLogEvery = 6 * time.Second
	remoteLogMax   = 1024
)

// logLevel is the level a client-caused line from remote is written at,
// and how many of its lines were held back before it.
func (s *Server) logLevel(remote netip.Addr, want slog.Level) (slog.Level, uint64) {
	ok, held := s.logs.Allow(remote, s.cfg.Now())
	if !ok {
		return slog.LevelDebug, 0
	}
	return want, held
}

// suppressed is the log attribute for held-back lines; nothing when none.
func suppressed(n uint64) slog.Attr {
	if n == 0 {
		return slog.Attr{}
	}
	return slog.Uint64("suppressed", n)
}

func (s *Server) registerMetrics(reg prometheus.Registerer) error {
	s.scripts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "ipxe", Name: "scripts_total",
		Help: "iPXE script requests by outcome: bootstrap, ramdisk, sanboot, chain, unknown (no live entry), uuid-mismatch (the entry's product_uuid pin refused the request; served the unknown-machine script), fenced (503), error (4xx/5xx).",
	}, []string{"kind"})
	for _, k := range kinds {
		s.scripts.WithLabelValues(k)
	}
	s.unknown = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "ipxe", Name: "unknown_requests_total",
		Help: "Script requests for a MAC without a live entry, by whether the discovery ledger holds it from DHCP (seen_on_dhcp=true: its last_seen moved). HTTP never adds a machine to the ledger.",
	}, []string{"seen_on_dhcp"})
	s.unknown.WithLabelValues("true")
	s.unknown.WithLabelValues("false")
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{s.scripts, s.unknown} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("ipxe: metrics: %w", err)
		}
	}
	return nil
}
