package httpproxy

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestBusy: with MaxRequests requests running, one more is busy at once;
// once they end, requests run again.
func TestBusy(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, func(c *Config) { c.MaxRequests = 1 })
	errc := make(chan error, 1)
	go func() {
		_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/block")})
		errc <- err
	}()
	select {
	case <-f.srv.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach the target")
	}
	_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/")})
	wantCode(t, err, relayerr.Busy)
	close(f.srv.release)
	if err := <-errc; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if _, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/")}); err != nil {
		t.Fatalf("request after the first ended: %v", err)
	}
	wantConns(t, f, map[string]int{ipAllowed: 2})
}

// TestMetricsAndLogLine: one log line per request and a counter per
// outcome code.
func TestMetricsAndLogLine(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	reqs := []string{"https://127.0.0.1:{P}/", "https://127.0.0.2:{P}/", "https://127.0.0.3:{P}/", "https://127.0.0.1:{P}/big"}
	for _, u := range reqs {
		_, _ = do(t, p, &sitev1.HttpProxyRequest{Url: f.u(u)})
	}
	text := metricText(t, f.reg)
	for _, want := range []string{
		`siteboot_httpproxy_requests_total{code="forbidden-target"} 2`,
		`siteboot_httpproxy_requests_total{code="ok"} 2`,
		`siteboot_httpproxy_request_duration_seconds_count 4`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, text)
		}
	}
	if got := strings.Count(f.logs.String(), "\n"); got != len(reqs) {
		t.Errorf("%d log lines for %d requests:\n%s", got, len(reqs), f.logs)
	}
}

// TestNew: New refuses a Config it cannot use and fills in defaults.
func TestNew(t *testing.T) {
	f := newFixture(t)
	bad := map[string]func(*Config){
		"no-targets":       func(c *Config) { c.Targets = nil },
		"no-secrets":       func(c *Config) { c.Secrets = nil },
		"no-logger":        func(c *Config) { c.Logger = nil },
		"negative-cap":     func(c *Config) { c.MaxResponseBytes = -1 },
		"timeout-over-max": func(c *Config) { c.Timeout = MaxTimeout + time.Second },
		"negative-max":     func(c *Config) { c.MaxRequests = -1 },
		"registered-twice": func(c *Config) {
			reg := prometheus.NewRegistry()
			_, _ = New(Config{Targets: c.Targets, Secrets: c.Secrets, Logger: c.Logger, Registerer: reg})
			c.Registerer = reg
		},
	}
	for name, mod := range bad {
		if _, err := New(f.config(mod)); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	p, err := New(Config{Targets: testSpec(), Secrets: f.secrets, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c := p.cfg
	if c.MaxResponseBytes != DefaultMaxResponseBytes || c.Timeout != DefaultTimeout || c.MaxRequests != DefaultMaxRequests ||
		len(c.Deny) != len(DefaultDeny) || c.Resolver == nil {
		t.Errorf("defaults not filled in: %+v", c)
	}
}

// metricText is everything reg holds, in the text format.
func metricText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
