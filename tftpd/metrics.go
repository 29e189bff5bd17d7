package tftpd

import "github.com/prometheus/client_golang/prometheus"

// Transfer results, the values of the result label.
const (
	resultOK       = "ok"        // the whole file was sent and acknowledged
	resultNotFound = "not_found" // the name is not in the set
	resultRefused  = "refused"   // write request, path trick or changed file
	resultTimeout  = "timeout"   // the client stopped acknowledging, or was too slow (timeLimit)
	resultAborted  = "aborted"   // the client sent an ERROR
	resultError    = "error"     // reading the file or sending failed, or shutdown
)

// metrics are the server's collectors.
type metrics struct {
	transfers  *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	suppressed prometheus.Counter
	active     prometheus.Gauge
	bytes      prometheus.Counter
	seconds    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "transfers_total",
			Help: "TFTP requests by result (ok, not_found, refused, timeout, aborted, error).",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "requests_dropped_total",
			Help: "TFTP datagrams on the listening port dropped unanswered, by reason (duplicate, max_transfers, max_per_source, malformed, no_resources), and unacknowledged transfers cancelled for a newer request when max_transfers run (preempted_unconfirmed).",
		}, []string{"reason"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "log_lines_suppressed_total",
			Help: "TFTP log lines left out by the per-reason rate limit.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "active_transfers",
			Help: "TFTP transfers running now (bounded by tftp.max_transfers).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "bytes_total",
			Help: "File bytes sent in TFTP DATA packets (first transmissions only).",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "transfer_seconds",
			Help:    "Duration of successful TFTP transfers, request to last acknowledgement.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	for _, r := range []string{resultOK, resultNotFound, resultRefused, resultTimeout, resultAborted, resultError} {
		m.transfers.WithLabelValues(r)
	}
	for _, r := range []string{dropDuplicate, dropMaxTransfers, dropMaxPerSource, dropMalformed, dropNotHost, dropErrorLimit, dropNoResources, dropPreempted} {
		m.dropped.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.transfers, m.dropped, m.suppressed, m.active, m.bytes, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
