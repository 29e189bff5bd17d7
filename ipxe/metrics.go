package ipxe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

func (s *Server) registerMetrics(reg prometheus.Registerer) error {
	s.scripts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "ipxe", Name: "scripts_total",
		Help: "iPXE script requests by outcome: bootstrap, ramdisk, sanboot, chain, unknown (no live entry), fenced (503), error (4xx/5xx).",
	}, []string{"kind"})
	for _, k := range kinds {
		s.scripts.WithLabelValues(k)
	}
	if reg == nil {
		return nil
	}
	if err := reg.Register(s.scripts); err != nil {
		return fmt.Errorf("ipxe: metrics: %w", err)
	}
	return nil
}
