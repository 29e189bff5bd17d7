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

// A sender on port 4011 picks its source address per packet, so the
// per-source limit alone gave a flood of made-up MACs from made-up
// sources a line for each of sourceLogMax sources every sourceLogEvery:
// 170 lines/s from one host, for as long as it sent. All sources together
// are held to allLogBurst, then one line per allLogEvery.
func TestUnknownFloodFromForgedSourcesBounded(t *testing.T) {
	l := newLogLimits(nil)
	start := time.Unix(1_000_000, 0)
	const seconds, perSecond = 60, 200
	lines, n := 0, 0
	for s := range seconds {
		now := start.Add(time.Duration(s) * time.Second)
		for range perSecond {
			n++
			mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:01", byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
			src := logSource{iface: "eth0", addr: netip.AddrFrom4([4]byte{172, 16 + byte(n>>16&0x0f), byte(n >> 8), byte(n) | 1})}
			if lv, _ := l.level(slog.LevelWarn, stageUnknown, mac, src, now); lv == slog.LevelWarn {
				lines++
			}
		}
	}
	want := allLogBurst + int(seconds*time.Second/allLogEvery)
	if lines > want {
		t.Errorf("%d DISCOVERs of made-up MACs from made-up sources in %d s wrote %d lines; want at most %d", n, seconds, lines, want)
	}
	if lines < allLogBurst {
		t.Errorf("only %d lines: the flood must still be seen", lines)
	}
}

// A relay's real lines that the shared budget refused during a flood
// from forged sources must not spend the relay's own: its first line once
// the flood is over is written, and says how many were held back.
func TestSharedBudgetLeavesSourceTokens(t *testing.T) {
	l := newLogLimits(nil)
	now := time.Unix(1_000_000, 0)
	for i := range allLogBurst + 100 { // the flood spends the shared budget
		src := logSource{iface: "eth0", addr: netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})}
		l.level(slog.LevelWarn, stageUnknown, fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff), src, now)
	}
	relay := logSource{iface: "eth0", addr: netip.MustParseAddr("10.9.0.1")}
	for i := range sourceLogBurst { // as many real machines as the relay's burst, during the flood
		if lv, _ := l.level(slog.LevelWarn, stageUnknown, fmt.Sprintf("0a:00:00:00:00:%02x", i), relay, now); lv != slog.LevelDebug {
			t.Fatalf("line %d during the flood at %v; the shared budget should hold it", i, lv)
		}
	}
	later := now.Add(2 * allLogEvery) // the shared budget has lines again
	lv, held := l.level(slog.LevelWarn, stageUnknown, "0a:00:00:00:01:00", relay, later)
	if lv != slog.LevelWarn {
		t.Fatalf("the relay's first line after the flood is at %v: lines never written spent its budget", lv)
	}
	if held.Key != "suppressed" || held.Value.Uint64() != sourceLogBurst {
		t.Errorf("its attribute %v; want suppressed=%d", held, sourceLogBurst)
	}
}
