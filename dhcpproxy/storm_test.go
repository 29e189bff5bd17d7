package dhcpproxy

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/internal/metrictest"

	"github.com/siteboot/siteboot/bootentry"
	"github.com/siteboot/siteboot/internal/logbuf"
	"github.com/siteboot/siteboot/internal/ratelimit"
)

// everyMAC is an entry for every MAC: a fleet of any size.
type everyMAC struct{}

func (everyMAC) Lookup(mac string, _ time.Time) (bootentry.Entry, bool) {
	return bootentry.Entry{MAC: mac}, true
}

func stormFixture(t *testing.T, level slog.Level) (*fixture, *logbuf.Buffer, *prometheus.Registry, *time.Time) {
	t.Helper()
	buf := &logbuf.Buffer{}
	reg := prometheus.NewRegistry()
	now := testNow
	f := newFixture(t, func(c *Config) {
		c.Entries = everyMAC{}
		c.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
		c.Registerer = reg
		c.Now = func() time.Time { return now }
	})
	return f, buf, reg, &now
}

func stormMAC(i int) string {
	return fmt.Sprintf("02:5b:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
}

// TestStormOneMACOneLine: a storm of DISCOVERs and REQUESTs from one
// machine's firmware, then from its iPXE, writes one Info line per stage;
// the rest are counted as suppressed, in the metric and in the summary.
func TestStormOneMACOneLine(t *testing.T) {
	f, buf, reg, now := stormFixture(t, slog.LevelInfo)
	const n = 500
	for range n {
		f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7), arrive67)
		f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7), arrive4011)
		*now = now.Add(50 * time.Millisecond) // 25 s of retries
	}
	ipxe := dhcpv4.WithOption(dhcpv4.OptUserClass("iPXE"))
	for range n {
		f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, ipxe), arrive67)
	}
	lines := buf.Lines("dhcpproxy: decision")
	if len(lines) != 2 {
		t.Fatalf("%d DISCOVERs and REQUESTs from one MAC wrote %d Info lines, want 2 (firmware, iPXE):\n%s", 3*n, len(lines), strings.Join(lines, "\n"))
	}
	for _, st := range []string{stagePXE, stageIPXE} {
		want := float64(2*n - 1)
		if st == stageIPXE {
			want = n - 1
		}
		if got := metrictest.Counter(t, f.srv.m.suppressed.WithLabelValues(st)); got != want {
			t.Errorf("siteboot_dhcp_log_lines_suppressed_total{stage=%q} = %v, want %v", st, got, want)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	f.srv.limits.stages.SummaryLine(f.srv.log, "dhcpproxy: log lines suppressed")
	sum := buf.Lines("dhcpproxy: log lines suppressed")
	if len(sum) != 1 || !strings.Contains(sum[0], fmt.Sprintf("suppressed=%d", 3*n-2)) ||
		!strings.Contains(sum[0], fmt.Sprintf("ipxe=%d pxe=%d", n-1, 2*n-1)) {
		t.Errorf("summary lines %q, want one with suppressed=%d ipxe=%d pxe=%d", sum, 3*n-2, n-1, 2*n-1)
	}
	// A window later the same machine boots again: one line again, saying
	// how many it stands for.
	*now = now.Add(ratelimit.StageWindow)
	f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7), arrive67)
	if l := buf.Lines("dhcpproxy: decision"); len(l) != 3 || !strings.Contains(l[2], fmt.Sprintf("suppressed=%d", 2*n-1)) {
		t.Errorf("the next boot's line: %q, want a third line with suppressed=%d", l[len(l)-1], 2*n-1)
	}
}

// TestStormManyMACs: N machines, each retrying, write at most N lines per
// stage, and at least one each: no machine's first line is lost.
func TestStormManyMACs(t *testing.T) {
	f, buf, _, now := stormFixture(t, slog.LevelInfo)
	const n = 2000
	for range 5 { // firmware retries every 4 s
		for i := range n {
			f.srv.Handle(pxeReq(t, stormMAC(i), dhcpv4.MessageTypeDiscover, 7), arrive67)
		}
		*now = now.Add(4 * time.Second)
	}
	lines := buf.Lines("dhcpproxy: decision")
	if len(lines) != n {
		t.Fatalf("%d machines × 5 DISCOVERs wrote %d Info lines, want %d", n, len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		for _, f := range strings.Fields(l) {
			if m, ok := strings.CutPrefix(f, "mac="); ok {
				seen[m] = true
			}
		}
	}
	if len(seen) != n {
		t.Errorf("lines name %d machines, want all %d", len(seen), n)
	}
}

// TestStormDebugShowsEveryPacket: at Debug every decision has its line.
func TestStormDebugShowsEveryPacket(t *testing.T) {
	f, buf, _, _ := stormFixture(t, slog.LevelDebug)
	const n = 300
	for i := range n {
		f.srv.Handle(pxeReq(t, stormMAC(i%3), dhcpv4.MessageTypeDiscover, 7), arrive67)
	}
	if got := len(buf.Lines("dhcpproxy: decision")); got != n {
		t.Errorf("%d DISCOVERs wrote %d decision lines at Debug, want %d", n, got, n)
	}
	if got := len(buf.Lines("dhcpproxy: decision", "level=INFO")); got != 3 {
		t.Errorf("%d Info lines among them, want 3 (one per machine)", got)
	}
}

// TestStormRandomMACsBounded: a stranger's DISCOVERs from random MACs,
// known or not, keep the log limits' memory within its bound, cost a
// bounded number of lines, and a real machine that boots after the flood
// still gets its line.
func TestStormRandomMACsBounded(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("known=%v", known), func(t *testing.T) {
			f, buf, _, now := stormFixture(t, slog.LevelInfo)
			if !known {
				f.srv.cfg.Entries = newTestState(t)
			}
			r := rand.New(rand.NewPCG(3, 4))
			const n = 3 * ratelimit.StageKeys
			for i := range n {
				mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256))
				f.srv.Handle(pxeReq(t, mac, dhcpv4.MessageTypeDiscover, 7), arrive67)
				if i%1000 == 0 {
					*now = now.Add(time.Second) // 1,000 a second
				}
			}
			if got := f.srv.limits.stages.Len(); got > ratelimit.StageKeys {
				t.Errorf("the log limits remember %d keys after %d random MACs; bound %d", got, n, ratelimit.StageKeys)
			}
			lines := len(buf.Lines("dhcpproxy: decision"))
			// known: the bound fills, then the spill bucket; unknown: the source's budget
			if max := ratelimit.StageKeys + ratelimit.StageSpillBurst + ratelimit.StageSpillRate*60; lines > max {
				t.Errorf("%d random MACs wrote %d lines, want at most %d", n, lines, max)
			}
			*now = now.Add(ratelimit.StageWindow)
			f.srv.cfg.Entries = newTestState(t)
			f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7), arrive67)
			if l := buf.Lines("dhcpproxy: decision", "mac="+macPlain); len(l) != 1 {
				t.Errorf("a real machine after the flood wrote %d lines, want 1", len(l))
			}
		})
	}
}

// TestServeWritesSummary: Serve writes the summary of held-back lines
// when it returns.
func TestServeWritesSummary(t *testing.T) {
	f, buf, _, _ := stormFixture(t, slog.LevelInfo)
	for range 10 {
		f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7), arrive67)
	}
	_, stop := serveLoopback(t, f)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if l := buf.Lines("dhcpproxy: log lines suppressed", "suppressed=9", "pxe=9"); len(l) != 1 {
		t.Errorf("summary lines after Serve: %q; log:\n%s", l, buf)
	}
}
