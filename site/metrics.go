package site

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics exports the entry counts of state at the clock's time.
func RegisterMetrics(reg prometheus.Registerer, state *State, now func() time.Time) error {
	return reg.Register(&entriesCollector{state: state, now: now})
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
