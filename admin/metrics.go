package admin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "admin", Name: "requests_total",
			Help: "Admin API calls by method and gRPC code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "siteboot", Subsystem: "admin", Name: "request_duration_seconds",
			Help:    "Admin API call latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"method"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: metrics: %w", err)
		}
	}
	return m, nil
}
