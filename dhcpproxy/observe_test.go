package dhcpproxy

import (
	"bytes"
	"encoding/json"
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

func TestLogLimiter(t *testing.T) {
	l := newLogLimiter(time.Minute, 2)
	at := func(s int) time.Time { return testNow.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		key string
		sec int
	}{{"a", 0}, {"a", 30}, {"a", 60}, {"b", 61}, {"c", 62}, {"a", 63}, {"a", -10}}
	var got []bool
	for _, s := range steps {
		got = append(got, l.allow(s.key, at(s.sec)))
	}
	// "c" fills the limiter (max 2), which starts over; a clock that steps
	// back lets a line through rather than silencing the key.
	want := []bool{true, false, true, true, true, true, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allow (-want +got):\n%s", diff)
	}
}
