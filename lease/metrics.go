package lease

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exports the lease and raft gauges and counters.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) error {
	collectors := []prometheus.Collector{
		n.refusals.counter,
		n.skipped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "siteboot", Subsystem: "lease", Name: "active",
			Help: "1 while this appliance holds the boot lease (its gate is open).",
		}, func() float64 {
			if _, open := n.Gate(); open {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "siteboot", Subsystem: "lease", Name: "epoch",
			Help: "The newest committed boot lease epoch.",
		}, func() float64 { e, _ := n.fsm.current(); return float64(e) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "siteboot", Subsystem: "raft", Name: "applied_index",
			Help: "The last raft log index applied to the local state.",
		}, func() float64 { return float64(n.AppliedIndex()) }),
	}
	for _, g := range collectors {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

func newSkippedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "lease", Name: "log_entries_skipped_total",
		Help: "Raft log entries the lease applied as nothing: undecodable, of an unknown kind, or an epoch breaking the rules.",
	})
}
