package bmc

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redact"
)

type metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "siteboot", Subsystem: "bmc", Name: "operations_total",
			Help: "BMC operations by driver, operation and result code (ok on success).",
		}, []string{"driver", "operation", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "siteboot", Subsystem: "bmc", Name: "operation_duration_seconds",
			Help:    "Duration of BMC operations, waiting included.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"driver"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ops, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// label is v when it is one of the fixed values, else "other".
func label(v string, fixed ...string) string {
	for _, f := range fixed {
		if v == f {
			return v
		}
	}
	return "other"
}

// loggable is the request's address when it parses, else "<invalid>": a
// refused address may carry userinfo (https://admin:pw@bmc).
func (r *Relay) loggable(req *sitev1.BmcOperationRequest) string {
	if _, err := parseAddress(req.GetDriver(), req.GetAddress()); err != nil {
		return "<invalid>"
	}
	return req.GetAddress()
}

// finish counts the operation and logs its one line: names, the checked
// address and the outcome; never credentials, args or the media URL, and
// an address or credentials_ref only once it passed its check.
func (r *Relay) finish(req *sitev1.BmcOperationRequest, p *plan, code, msg string, d time.Duration) {
	driver := label(req.GetDriver(), driverIPMI, driverRedfish)
	op := label(req.GetOperation(), opGetPower, opSetPower, opSetBootDevice, opInsertMedia, opEjectMedia, opInspect)
	r.metrics.ops.WithLabelValues(driver, op, code).Inc()
	r.metrics.duration.WithLabelValues(driver).Observe(d.Seconds())
	attrs := []any{slog.String("driver", driver), slog.String("operation", op),
		slog.String("code", code), slog.Duration("duration", d),
		slog.String("address", r.loggable(req)),
		slog.String("credentials_ref", redact.Ref(req.GetCredentialsRef()))}
	if p != nil && p.target.Addr().IsValid() {
		attrs = append(attrs, slog.String("bmc", p.target.String()))
	}
	if code == "ok" {
		r.cfg.Logger.Info("bmc operation", attrs...)
		return
	}
	r.cfg.Logger.Warn("bmc operation failed", append(attrs, slog.String("message", msg))...)
}
