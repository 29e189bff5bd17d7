package imagecache

import (
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	data := testBytes(90, 1500)
	reg := prometheus.NewRegistry()
	cfg := testConfig(t)
	cfg.Metrics, cfg.Capacity = reg, 1<<20
	c := readyCache(t, cfg, data)
	srv, client := serveCache(t, c)
	get(t, client, "GET", srv.URL+URLPath(digestOf(data)), map[string]string{"Range": "bytes=0-99"})
	get(t, client, "GET", srv.URL+URLPath(digestOf([]byte("?"))), nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%s", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			if len(labels) > 0 {
				name += fmt.Sprint(labels)
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"siteboot_cache_bytes_served_total":        100,
		"siteboot_cache_requests_total[code=206]":  1,
		"siteboot_cache_requests_total[code=404]":  1,
		"siteboot_cache_pulls_total[result=ok]":    1,
		"siteboot_cache_pull_bytes_total":          1500,
		"siteboot_cache_evictions_total":           0,
		"siteboot_cache_fast_path_handoffs_total":  0,
		"siteboot_cache_fast_path_responses_total": 0,
		"siteboot_cache_capacity_bytes":            1 << 20,
		"siteboot_cache_used_bytes":                1500,
		"siteboot_cache_images[state=queued]":      0,
		"siteboot_cache_images[state=pulling]":     0,
		"siteboot_cache_images[state=ready]":       1,
		"siteboot_cache_images[state=evicting]":    0,
		"siteboot_cache_images[state=failed]":      0,
		"siteboot_cache_images[state=verifying]":   0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
