package ipxe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

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
	s.suppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "ipxe", Name: "log_lines_suppressed_total",
		Help: "Request lines written at Debug instead of Info or higher by the log limits (one line per client, stage and level a minute), by stage (bootstrap, script, unknown, refused).",
	}, []string{"stage"})
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{s.scripts, s.unknown, s.suppressed} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("ipxe: metrics: %w", err)
		}
	}
	return nil
}
