package lease

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exports the lease and raft gauges.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) error {
	gauges := []prometheus.Collector{
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
	for _, g := range gauges {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}
