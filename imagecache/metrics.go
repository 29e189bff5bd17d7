package imagecache

import "github.com/prometheus/client_golang/prometheus"

// metrics are the cache's counters; gauges are read at scrape time.
type metrics struct {
	c           *Cache
	bytesServed prometheus.Counter
	requests    *prometheus.CounterVec
	pulls       *prometheus.CounterVec
	pullBytes   prometheus.Counter
	evictions   prometheus.Counter
	fastServed  prometheus.Counter
	fastHanded  prometheus.Counter
}

func newMetrics(c *Cache) *metrics {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "siteboot", Subsystem: "cache", Name: name, Help: help}
	}
	return &metrics{
		c:           c,
		bytesServed: prometheus.NewCounter(opts("bytes_served_total", "Image bytes sent in /cache responses.")),
		requests: prometheus.NewCounterVec(opts("requests_total",
			"/cache requests by HTTP status code."), []string{"code"}),
		pulls: prometheus.NewCounterVec(opts("pulls_total",
			"Finished pulls by result (ok, failed, cancelled)."), []string{"result"}),
		pullBytes: prometheus.NewCounter(opts("pull_bytes_total", "Bytes written to the cache by pulls.")),
		evictions: prometheus.NewCounter(opts("evictions_total", "Images deleted by eviction or image rm.")),
		fastServed: prometheus.NewCounter(opts("fast_path_responses_total",
			"/cache responses sent by the fast path, without net/http (also in requests_total).")),
		fastHanded: prometheus.NewCounter(opts("fast_path_handoffs_total",
			"Connections the fast path handed to net/http at a request it does not answer itself.")),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, col := range []prometheus.Collector{m.bytesServed, m.requests, m.pulls, m.pullBytes, m.evictions, m.fastServed, m.fastHanded, m} {
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
		"Images by state (queued, pulling, ready, evicting, failed).", []string{"state"}, nil)
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
	for s := StateQueued; s <= StateFailed; s++ {
		ch <- prometheus.MustNewConstMetric(imagesDesc, prometheus.GaugeValue, float64(counts[s]), s.String())
	}
}
