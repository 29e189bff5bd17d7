package tftpd

import "github.com/prometheus/client_golang/prometheus"

// Transfer results, the values of the result label.
const (
	resultOK       = "ok"        // the whole file was sent and acknowledged
	resultNotFound = "not_found" // the name is not in the set
	resultRefused  = "refused"   // write request, path trick or changed file
	resultTimeout  = "timeout"   // the client stopped acknowledging
	resultAborted  = "aborted"   // the client sent an ERROR or went away
	resultError    = "error"     // reading the file failed, or shutdown
)

// metrics are the server's collectors.
type metrics struct {
	transfers *prometheus.CounterVec
	bytes     prometheus.Counter
	seconds   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "tftp", Name: "transfers_total",
			Help: "TFTP requests by result (ok, not_found, refused, timeout, aborted, error).",
		}, []string{"result"}),
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
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.transfers, m.bytes, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
