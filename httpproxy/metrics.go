package httpproxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are siteboot_httpproxy_*. The only label is the outcome code:
// nothing a request names (node, URL, header) becomes a label.
type metrics struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "httpproxy", Name: "requests_total",
			Help: "Proxied HTTP requests by outcome: ok or the relay error code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "siteboot", Subsystem: "httpproxy", Name: "request_duration_seconds",
			Help:    "Time from the call to the end of the response body or the failure.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 8),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpproxy: register metrics: %w", err)
		}
	}
	return m, nil
}
