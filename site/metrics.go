package site

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics exports the entry counts of state at the clock's time and
// the count of what its state machine skipped.
func RegisterMetrics(reg prometheus.Registerer, state *State, now func() time.Time) error {
	if err := reg.Register(&entriesCollector{state: state, now: now}); err != nil {
		return err
	}
	return reg.Register(state.skipped)
}

var entriesDesc = prometheus.NewDesc("siteboot_site_entries",
	"Boot entries held, by state (live, expired: past not_after, not yet purged).", []string{"state"}, nil)

var nodesDesc = prometheus.NewDesc("siteboot_site_nodes",
	"Nodes holding at least one boot entry.", nil, nil)

type entriesCollector struct {
	state *State
	now   func() time.Time
}

func (c *entriesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- entriesDesc
	ch <- nodesDesc
}

func (c *entriesCollector) Collect(ch chan<- prometheus.Metric) {
	total, live, nodes := c.state.Counts(c.now())
	ch <- prometheus.MustNewConstMetric(entriesDesc, prometheus.GaugeValue, float64(live), "live")
	ch <- prometheus.MustNewConstMetric(entriesDesc, prometheus.GaugeValue, float64(total-live), "expired")
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(nodes))
}

// skippedKinds are the values of siteboot_site_apply_skipped_total's what
// label.
var skippedKinds = []string{"command", "entry", "snapshot_entry", "snapshot_image", "snapshot_spec"}

func newSkippedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "site", Name: "apply_skipped_total",
		Help: "What the state machine refused because it breaks a validation rule, never applied: " +
			"whole commands, entries of a PutEntries, and entries, images or the spec of a restored snapshot.",
	}, []string{"what"})
	for _, k := range skippedKinds {
		c.WithLabelValues(k)
	}
	return c
}
