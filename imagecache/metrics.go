package imagecache

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/imagecache/serve"
)

// metrics are the cache's counters, the serving ones included; gauges are
// read at scrape time.
type metrics struct {
	c         *Cache
	serve     *serve.Metrics
	pulls     *prometheus.CounterVec
	pullBytes prometheus.Counter
	evictions prometheus.Counter
}

func newMetrics(c *Cache) *metrics {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "siteboot", Subsystem: "cache", Name: name, Help: help}
	}
	return &metrics{
		c:     c,
		serve: serve.NewMetrics(),
		pulls: prometheus.NewCounterVec(opts("pulls_total",
			"Finished pulls by result (ok, failed, cancelled)."), []string{"result"}),
		pullBytes: prometheus.NewCounter(opts("pull_bytes_total", "Bytes written to the cache by pulls.")),
		evictions: prometheus.NewCounter(opts("evictions_total", "Images deleted by eviction or image rm.")),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, col := range append(m.serve.Collectors(), m.pulls, m.pullBytes, m.evictions, m) {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

var (
	capacityDesc = prometheus.NewDesc("siteboot_cache_capacity_bytes",
		"Configured cache capacity in bytes (0 = unbounded).", nil, nil)
	usedDesc = prometheus.NewDesc("siteboot_cache_used_bytes",
		"Bytes of blobs on disk, including images being evicted.", nil, nil)
	imagesDesc = prometheus.NewDesc("siteboot_cache_images",
		"Images by state (queued, pulling, ready, evicting, failed, verifying).", []string{"state"}, nil)
)

// Describe implements prometheus.Collector for the gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- capacityDesc
	ch <- usedDesc
	ch <- imagesDesc
}

// Collect implements prometheus.Collector for the gauges.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	c.mu.Lock()
	used, _ := c.usedLocked()
	counts := make(map[State]int)
	for _, e := range c.entries {
		counts[e.state]++
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(c.cfg.Capacity))
	ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(used))
	for s := StateQueued; s <= StateVerifying; s++ {
		ch <- prometheus.MustNewConstMetric(imagesDesc, prometheus.GaugeValue, float64(counts[s]), s.String())
	}
}
