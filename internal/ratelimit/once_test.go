package ratelimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func runOnce(o *Once[string], steps []step) []result {
	var out []result
	for _, s := range steps {
		ok, n := o.Allow(s.key, at(s.sec))
		out = append(out, result{ok, n})
	}
	return out
}

func TestOnceOneCallPerKeyPerWindow(t *testing.T) {
	o := NewOnce[string](10*time.Second, 8, 1, time.Second)
	got := runOnce(o, []step{
		{"a", 0}, {"a", 1}, {"a", 9.9}, // first through, repeats refused
		{"b", 5},              // another key has its own window
		{"a", 10},             // the window has passed: through, saying 2 were held
		{"a", 15},             // the window restarts at the call let through
		{"a", 20.5}, {"a", 5}, // clock steps back: restarts the window, lets nothing through early
		{"a", 14.9}, {"a", 15},
	})
	want := []result{
		{true, 0}, {false, 0}, {false, 0},
		{true, 0},
		{true, 2},
		{false, 0},
		{true, 1}, {false, 0},
		{false, 0}, {true, 2},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Allow (-want +got):\n%s", d)
	}
	if all, keys := o.Refused(); all != 5 || keys != 0 {
		t.Errorf("Refused = %d, %d; want 5, 0", all, keys)
	}
}

// TestOnceRandomKeysBounded: a stranger's random keys never grow the set
// past its bound, cost at most the spill bucket's lines, and a real key
// arriving during the flood gets through once it ends (or by the spill).
func TestOnceRandomKeysBounded(t *testing.T) {
	const maxKeys = 64
	o := NewOnce[string](time.Minute, maxKeys, 4, time.Second)
	r := rand.New(rand.NewPCG(1, 2))
	let := 0
	for i := range 100000 {
		now := at(float64(i) / 1000) // 1,000 random keys a second for 100 s
		if ok, _ := o.Allow(fmt.Sprintf("%012x", r.Uint64()), now); ok {
			let++
		}
		if n := o.Len(); n > maxKeys {
			t.Fatalf("after %d keys, %d remembered; bound %d", i+1, n, maxKeys)
		}
	}
	// maxKeys fill the set, then the bucket: its burst plus one a second;
	// a window later the first keys have expired and make room again.
	if max := 2*maxKeys + 4 + 100; let > max {
		t.Errorf("%d random keys let through in 100 s, want at most %d", let, max)
	}
	if _, keys := o.Refused(); keys == 0 {
		t.Errorf("no new key refused in a flood of random keys")
	}
	// The flood ends; the real machine's first call, a window later, is let through.
	if ok, _ := o.Allow("real", at(100+61)); !ok {
		t.Errorf("a real key's first call after the flood was refused")
	}
	// During a flood, the spill bucket lets a real key's retries through
	// within a few seconds.
	o = NewOnce[string](time.Minute, maxKeys, 1, time.Second)
	got := false
	for i := range 10000 {
		now := at(float64(i) / 1000)
		o.Allow(fmt.Sprintf("%012x", r.Uint64()), now)
		if i%500 == 0 { // the real machine retries every half second
			if ok, _ := o.Allow("real", now); ok {
				got = true
				break
			}
		}
	}
	if !got {
		t.Errorf("a real key retrying during a 10 s flood was never let through")
	}
}

// TestOnceEvictionPrefersExpired: a full set evicts a key unseen for a
// window without spending the spill bucket, so live keys stay.
func TestOnceEvictionPrefersExpired(t *testing.T) {
	o := NewOnce[string](10*time.Second, 2, 1, time.Hour)
	o.Allow("a", at(0))
	o.Allow("b", at(5))
	if ok, _ := o.Allow("c", at(11)); !ok { // a expired: c takes its place
		t.Fatal("c refused with an expired key to replace")
	}
	if ok, _ := o.Allow("b", at(12)); ok {
		t.Error("b, still live, was forgotten")
	}
	if ok, _ := o.Allow("d", at(12)); !ok { // all live: the spill token
		t.Fatal("d refused with a spill token left")
	}
	if ok, _ := o.Allow("e", at(12)); ok {
		t.Error("e let through with no expired key and no spill token")
	}
}

func TestStagesSummaryAndCount(t *testing.T) {
	counted := map[string]int{}
	s := NewStagesWith(time.Minute, 16, 1, time.Second, func(st string) { counted[st]++ })
	for range 5 {
		s.Level("02:00:00:00:00:01", "pxe", slog.LevelInfo, at(0))
		s.Level("02:00:00:00:00:01", "ipxe", slog.LevelInfo, at(0))
	}
	if l, _ := s.Level("02:00:00:00:00:01", "pxe", slog.LevelWarn, at(0)); l != slog.LevelWarn {
		t.Errorf("a Warn line after Info lines of the stage is at %v, want WARN", l)
	}
	if d := cmp.Diff(map[string]int{"pxe": 4, "ipxe": 4}, counted); d != "" {
		t.Errorf("counted (-want +got):\n%s", d)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s.SummaryLine(log, "test: log lines suppressed")
	if line := buf.String(); !strings.Contains(line, "suppressed=8") || !strings.Contains(line, "ipxe=4 pxe=4") {
		t.Errorf("summary line %q, want suppressed=8 ... ipxe=4 pxe=4", line)
	}
	buf.Reset()
	s.SummaryLine(log, "test: log lines suppressed")
	if buf.Len() != 0 {
		t.Errorf("second summary with nothing held back wrote %q", buf.String())
	}
	l, a := s.Level("02:00:00:00:00:01", "pxe", slog.LevelInfo, at(60))
	if l != slog.LevelInfo || a.String() != "suppressed=4" {
		t.Errorf("after the window: %v %v, want INFO suppressed=4", l, a)
	}
}
