package dhcpproxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors.
type metrics struct {
	requests   *prometheus.CounterVec
	latency    prometheus.Histogram
	sendErrors prometheus.Counter
	suppressed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "dhcp", Name: "requests_total",
			Help: "DHCP packets handled, by message type and decision (offer, ack, unknown-mac, uuid-mismatch, gate-closed, no-bootfile, ignored).",
		}, []string{"type", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "siteboot", Subsystem: "dhcp", Name: "reply_seconds",
			Help:    "Time from a packet's arrival to the reply decision.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3},
		}),
		sendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "dhcp", Name: "send_errors_total",
			Help: "Replies that could not be written to the socket.",
		}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "dhcp", Name: "log_lines_suppressed_total",
			Help: "Decision lines written at Debug instead of Info or Warn by the log limits (one line per machine and boot stage a minute), by stage (pxe, ipxe, unknown, relay).",
		}, []string{"stage"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.sendErrors, m.suppressed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("dhcpproxy: register metrics: %w", err)
		}
	}
	return m, nil
}
