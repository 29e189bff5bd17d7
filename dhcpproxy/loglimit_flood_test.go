package dhcpproxy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"
)

// A real unknown machine that sends its first DISCOVER while a flood of
// random MACs from the same source has spent the source's budget logs at
// Debug; its retry once the budget refills, within the stage window, must
// log at Warn. The stage limit must not count a line the source limit
// then held back as the machine's one line of the window.
func TestUnknownLineHeldBySourceIsNotSpent(t *testing.T) {
	l := newLogLimits(nil)
	src := logSource{iface: "eth0", addr: netip.IPv4Unspecified()}
	now := time.Unix(1_000_000, 0)
	for i := range sourceLogBurst + 50 {
		l.level(slog.LevelWarn, stageUnknown, fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff), src, now)
	}
	real := "52:54:00:12:34:56"
	if lv, _ := l.level(slog.LevelWarn, stageUnknown, real, src, now); lv != slog.LevelDebug {
		t.Fatalf("the flood left the source's budget: got %v", lv)
	}
	later := now.Add(2 * sourceLogEvery) // the source refilled; the window is still on
	if lv, _ := l.level(slog.LevelWarn, stageUnknown, real, src, later); lv != slog.LevelWarn {
		t.Fatalf("the real machine's retry after the flood logs at %v; want WARN (its one line was never written)", lv)
	}
}
