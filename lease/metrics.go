package lease

import "github.com/prometheus/client_golang/prometheus"

// registerMetrics exports the lease and raft gauges and counters on reg.
func (n *Node) registerMetrics(reg prometheus.Registerer) error {
	collectors := []prometheus.Collector{
		n.refusals.counter,
		n.skipped,
		n.fences,
		// Read at scrape time from the gate itself, so the gauge is right
		// even when the watchdog has not run (a paused process).
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
			Help: "The newest boot lease epoch this appliance knows (committed, or pushed in external mode).",
		}, func() float64 { return float64(n.knownEpoch()) }),
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

// knownEpoch is Status().Epoch without the rest.
func (n *Node) knownEpoch() uint64 {
	if n.cfg.Mode == External {
		return n.fsm.externalEpoch()
	}
	e, _ := n.fsm.current()
	return e
}

func newSkippedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "lease", Name: "log_entries_skipped_total",
		Help: "Raft log entries the lease applied as nothing: undecodable, of an unknown kind, or an epoch breaking the rules.",
	})
}

// newFenceCounter counts fence events by reason, every reason present from
// the start.
func newFenceCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "lease", Name: "fence_events_total",
		Help: "Times the gate closed on its own: the window expired without a renewal, raft leadership was lost, or the control plane pushed active=false.",
	}, []string{"reason"})
	for _, r := range fenceReasons {
		c.WithLabelValues(r)
	}
	return c
}
