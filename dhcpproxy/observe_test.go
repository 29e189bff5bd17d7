package dhcpproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// logLine is the part of a decision log line the tests compare.
type logLine struct {
	Level, Msg, Decision, MAC, XID, Iface, Arch string
	Reason                                      string
	Giaddr                                      string
	Epoch                                       float64
}

func TestDecisionLogLines(t *testing.T) {
	var buf bytes.Buffer
	now := testNow
	f := newFixture(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Now = func() time.Time { return now }
	})
	send := func(pkt []byte) { f.srv.Handle(pkt, arrive67) }
	send(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithRelay(relayIPv4)))
	send(pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 0))
	send(pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 0)) // within a minute: Debug
	now = now.Add(unknownLogEvery)
	send(pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 0)) // a minute later: Info again
	send(buildReq(t, macPlain, dhcpv4.MessageTypeDiscover))
	send(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 10))
	f.gate.closed.Store(true)
	send(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7))

	line := func(level, decision, mac, arch string, giaddr string, epoch float64) logLine {
		return logLine{Level: level, Msg: "dhcpproxy: decision", Decision: decision, MAC: mac,
			XID: "0xdeadbeef", Iface: "eth0", Arch: arch, Giaddr: giaddr, Epoch: epoch}
	}
	want := []logLine{
		line("INFO", "offer", macPlain, "x86_64-efi", "10.1.0.1", 7),
		line("INFO", "unknown-mac", macUnknown, "bios", "", 0),
		line("DEBUG", "unknown-mac", macUnknown, "bios", "", 0),
		line("INFO", "unknown-mac", macUnknown, "bios", "", 0),
		line("DEBUG", "ignored:not-pxe", macPlain, "", "", 0),
		{Level: "WARN", Msg: "dhcpproxy: decision", Decision: "no-bootfile", MAC: macPlain, XID: "0xdeadbeef",
			Iface: "eth0", Arch: "arm32-efi", Reason: "no boot file for arch arm32-efi"},
		line("DEBUG", "gate-closed", macPlain, "x86_64-efi", "", 0),
	}
	var got []logLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if strings.Contains(l, "secret") {
			t.Errorf("log line mentions a secret: %s", l)
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		epoch, _ := m["epoch"].(float64)
		got = append(got, logLine{Level: str("level"), Msg: str("msg"), Decision: str("decision"),
			MAC: str("mac"), XID: str("xid"), Iface: str("iface"), Arch: str("arch"), Giaddr: str("giaddr"), Epoch: epoch, Reason: str("reason")})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, func(c *Config) { c.Registerer = reg })
	f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7), arrive67)
	f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7), arrive4011)
	f.srv.Handle(pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7), arrive67)
	f.srv.Handle([]byte("junk"), arrive67)
	f.srv.Handle(pxeReq(t, macPlain, dhcpv4.MessageTypeInform, 7), arrive67)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+labels(m)] = value(m)
		}
	}
	want := map[string]float64{
		"siteboot_dhcp_requests_total{result=ack,type=request}":          1,
		"siteboot_dhcp_requests_total{result=offer,type=discover}":       1,
		"siteboot_dhcp_requests_total{result=unknown-mac,type=discover}": 1,
		"siteboot_dhcp_requests_total{result=ignored,type=malformed}":    1,
		"siteboot_dhcp_requests_total{result=ignored,type=other}":        1,
		"siteboot_dhcp_reply_seconds{}":                                  5,
		"siteboot_dhcp_send_errors_total{}":                              0,
		// the firmware's ACK on 4011 follows its offer: one line for the stage
		"siteboot_dhcp_log_lines_suppressed_total{stage=pxe}":     1,
		"siteboot_dhcp_log_lines_suppressed_total{stage=ipxe}":    0,
		"siteboot_dhcp_log_lines_suppressed_total{stage=unknown}": 0,
		"siteboot_dhcp_log_lines_suppressed_total{stage=relay}":   0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if _, err := New(Config{Entries: newTestState(t), Gate: &testGate{}, BootFiles: testBootFiles, Registerer: reg}); err == nil {
		t.Error("a second server on the same registry registered its metrics twice")
	}
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// value is a counter's value or a histogram's sample count.
func value(m *dto.Metric) float64 {
	if h := m.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

func TestLogLimits(t *testing.T) {
	l := newLogLimits(nil)
	src := logSource{iface: "eth0"}
	at := func(s int) time.Time { return testNow.Add(time.Duration(s) * time.Second) }
	type line struct {
		Level slog.Level
		Held  uint64
	}
	var got []line
	log := func(mac string, sec int) {
		lv, held := l.level(slog.LevelInfo, stageUnknown, mac, src, at(sec))
		var n uint64
		if held.Key != "" {
			n = held.Value.Uint64()
		}
		got = append(got, line{lv, n})
	}
	log("52:54:00:00:10:00", 0)
	log("52:54:00:00:10:00", 30) // the same MAC within a minute: Debug, not counted as held back
	log("52:54:00:00:10:00", 60) // a minute later: Info again
	for i := 1; i <= 20; i++ {   // 20 new MACs from one source: the rest of the burst, then held back
		log(fmt.Sprintf("52:54:00:00:10:%02x", i), 60)
	}
	log("52:54:00:00:10:99", 66) // one refilled: it says how many were held back
	want := []line{{slog.LevelInfo, 0}, {slog.LevelDebug, 0}, {slog.LevelInfo, 0}}
	for i := 1; i <= 20; i++ {
		lv := slog.LevelInfo
		if i > sourceLogBurst-1 { // one token of the refilled burst went to the line at 60 s

			lv = slog.LevelDebug
		}
		want = append(want, line{lv, 0})
	}
	want = append(want, line{slog.LevelInfo, 20 - (sourceLogBurst - 1)})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
}

// TestUnknownFloodLogLines: a flood of made-up MACs from one source writes
// a bounded number of Info lines, and the next line it may write says how
// many were held back.
func TestUnknownFloodLogLines(t *testing.T) {
	var buf bytes.Buffer
	now := testNow
	f := newFixture(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Now = func() time.Time { return now }
	})
	for i := range 200 {
		f.srv.Handle(pxeReq(t, fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), dhcpv4.MessageTypeDiscover, 7), arrive67)
	}
	if n := strings.Count(buf.String(), "\n"); n > sourceLogBurst {
		t.Fatalf("200 unknown MACs from one source wrote %d log lines, want at most %d", n, sourceLogBurst)
	}
	buf.Reset()
	now = now.Add(sourceLogEvery)
	f.srv.Handle(pxeReq(t, "02:00:00:00:ff:ff", dhcpv4.MessageTypeDiscover, 7), arrive67)
	var line struct {
		Decision   string
		Suppressed int
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if line.Decision != "unknown-mac" || line.Suppressed != 200-sourceLogBurst {
		t.Errorf("next line = %+v; want unknown-mac with suppressed=%d", line, 200-sourceLogBurst)
	}
}

// TestAnsweredFloodLogLines: anyone on the link sees the MACs that boot
// (their DISCOVERs are broadcast) and can send requests with one as fast
// as they like. The lines those cause (answers, a known machine without a
// boot file) are bounded per MAC, and the next line that MAC may write
// says how many were held back; a real boot's few answers all show.
func TestAnsweredFloodLogLines(t *testing.T) {
	tests := []struct {
		name     string
		arch     uint16
		decision string
	}{
		{"offer", 7, "offer"},
		{"no boot file", 10, "no-bootfile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			now := testNow
			f := newFixture(t, func(c *Config) {
				c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
				c.Now = func() time.Time { return now }
			})
			pkt := pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, tt.arch)
			for range 200 {
				f.srv.Handle(pkt, arrive67)
			}
			if n := strings.Count(buf.String(), `"decision":"`+tt.decision+`"`); n == 0 || n > answerLogBurst {
				t.Fatalf("200 requests for one MAC wrote %d %s lines, want 1-%d", n, tt.decision, answerLogBurst)
			}
			buf.Reset()
			now = now.Add(answerLogEvery)
			f.srv.Handle(pkt, arrive67)
			var line struct {
				Decision   string
				Suppressed int
			}
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			if line.Decision != tt.decision || line.Suppressed != 200-answerLogBurst {
				t.Errorf("next line = %+v; want %s with suppressed=%d", line, tt.decision, 200-answerLogBurst)
			}
		})
	}
}
