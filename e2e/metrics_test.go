package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is one scrape of siteboot's /metrics.
type metrics map[string]*dto.MetricFamily

// scrape fetches /metrics from inside the lab.
func (a *appliance) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	return metrics(fams), nil
}

// mustScrape is scrape that fails the test on error.
func (a *appliance) mustScrape(ctx context.Context) metrics {
	a.t.Helper()
	m, err := a.scrape(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	return m
}

// value sums the counter or gauge samples of name whose labels include
// every pair of labels ("k=v" strings).
func (m metrics) value(name string, labels ...string) float64 {
	fam, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, s := range fam.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.GetCounter() != nil:
			sum += s.GetCounter().GetValue()
		case s.GetGauge() != nil:
			sum += s.GetGauge().GetValue()
		case s.GetUntyped() != nil:
			sum += s.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(s *dto.Metric, want []string) bool {
	have := map[string]string{}
	for _, lp := range s.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		if have[k] != v {
			return false
		}
	}
	return true
}

// nonZero lists the non-zero samples of name as "labels value", sorted,
// for comparisons and reports.
func (m metrics) nonZero(name string) []string {
	fam, ok := m[name]
	if !ok {
		return nil
	}
	var out []string
	for _, s := range fam.GetMetric() {
		v := s.GetCounter().GetValue() + s.GetGauge().GetValue() + s.GetUntyped().GetValue()
		if v == 0 {
			continue
		}
		var ls []string
		for _, lp := range s.GetLabel() {
			ls = append(ls, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, fmt.Sprintf("{%s} %g", strings.Join(ls, ","), v))
	}
	sort.Strings(out)
	return out
}
