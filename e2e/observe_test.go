package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

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

// logLine is one JSON line of siteboot's log (log.format: json).
type logLine map[string]any

// str returns field k as a string ("" when absent); numbers are printed.
func (l logLine) str(k string) string {
	switch v := l[k].(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(v)
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

// at is the line's time stamp.
func (l logLine) at() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, l.str("time"))
	return t
}

// matches reports whether every key has the given value.
func (l logLine) matches(kv map[string]string) bool {
	for k, v := range kv {
		if l.str(k) != v {
			return false
		}
	}
	return true
}

// compact renders the fields a reader of a failed test needs.
func (l logLine) compact() string {
	var b strings.Builder
	b.WriteString(l.at().Format("15:04:05.000") + " " + l.str("msg"))
	for _, k := range []string{"decision", "result", "mac", "remote", "file", "path", "method", "code", "buildarch", "platform", "giaddr", "to", "err"} {
		if v := l.str(k); v != "" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	return b.String()
}

// parseLog returns the JSON lines of text; other lines are skipped.
func parseLog(text string) []logLine {
	var out []logLine
	for _, raw := range strings.Split(text, "\n") {
		if !strings.HasPrefix(raw, "{") {
			continue
		}
		var l logLine
		if json.Unmarshal([]byte(raw), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// filterLog returns the lines whose msg is msg and whose fields match kv.
func filterLog(lines []logLine, msg string, kv map[string]string) []logLine {
	var out []logLine
	for _, l := range lines {
		if l.str("msg") == msg && l.matches(kv) {
			out = append(out, l)
		}
	}
	return out
}

// Messages siteboot logs once per decision (see dhcpproxy, ipxe, tftpd,
// imagecache).
const (
	msgDHCP      = "dhcpproxy: decision"
	msgBootstrap = "ipxe: bootstrap served"
	msgScript    = "ipxe: script served"
	msgUnknown   = "ipxe: no live entry; told the machine so and recorded it"
	msgTFTP      = "tftp transfer"
	msgCache     = "imagecache: served"
	msgReady     = "siteboot ready"
)
