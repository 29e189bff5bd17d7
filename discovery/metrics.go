package discovery

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

func (l *Ledger) registerMetrics(reg prometheus.Registerer) error {
	l.sighting = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "discovery", Name: "sightings_total",
		Help: "DHCP requests recorded from machines without a live entry.",
	})
	l.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "discovery", Name: "new_machines_refused_total",
		Help: "Sightings of machines not in the ledger dropped because their MAC prefix or source was over the new-machine limit.",
	})
	l.evicted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "discovery", Name: "evictions_total",
		Help: "Machines evicted from the full ledger to make room, by kind (one-shot: seen once or only briefly; repeat: seen repeatedly).",
	}, []string{"kind"})
	l.saves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "discovery", Name: "ledger_saves_total",
		Help: "Saves of the discovered-machine ledger to disk, by result (ok, error).",
	}, []string{"result"})
	for _, k := range []string{"one-shot", "repeat"} {
		l.evicted.WithLabelValues(k)
	}
	l.saves.WithLabelValues("ok")
	l.saves.WithLabelValues("error")
	if reg == nil {
		return nil
	}
	machines := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "siteboot", Subsystem: "discovery", Name: "machines",
		Help: "Machines in the discovered-machine ledger (seen within the forget window).",
	}, func() float64 { return float64(l.Count()) })
	for _, c := range []prometheus.Collector{l.sighting, l.refused, l.evicted, l.saves, machines} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("discovery: metrics: %w", err)
		}
	}
	return nil
}
