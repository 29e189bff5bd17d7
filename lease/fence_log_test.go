package lease

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/site"
)

// logBuffer collects a node's JSON log lines.
type logBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	from int // line reads only what was logged after this offset (mark)
}

// mark makes line read only what is logged from now on.
func (l *logBuffer) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.from = l.b.Len()
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// line is the first line logged with msg since the mark, decoded; nil if
// none. The first: a later renewal on a loaded machine may log the same
// message for a later window (and an earlier one, before the mark, for an
// earlier window).
func (l *logBuffer) line(t *testing.T, msg string) map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.b.String()[l.from:]
	l.mu.Unlock()
	var found map[string]any
	for _, raw := range strings.Split(strings.TrimSpace(text), "\n") {
		if raw == "" {
			continue // nothing logged since the mark
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		if m["msg"] == msg && found == nil {
			found = m
		}
	}
	return found
}

// openLogged is openStandalone with the node's log in a buffer.
func openLogged(t *testing.T, ttl time.Duration) (*harness, *stall, *logBuffer) {
	t.Helper()
	buf := &logBuffer{}
	st := site.NewState()
	n, err := Open(Config{Dir: t.TempDir(), ID: "appliance-1", TTL: ttl, StateMachine: st,
		Logger: slog.New(slog.NewJSONHandler(buf, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s := stallable(n)
	return run(t, t.TempDir(), n, st), s, buf
}

// stallPastWindow stalls the renewals with the watchdog stopped (a paused
// process: nothing runs) until the window is over, and returns its end;
// buf reads only what is logged from the stall on. It reports false when
// the machine was too slow to stop the watchdog before the window ran out,
// or a watchdog call already under way closed the gate anyway (the
// watchdog, not the late renewal, then logs the fence, which is not the
// case under test); the caller tries a fresh node.
func stallPastWindow(t *testing.T, h *harness, s *stall, buf *logBuffer) (time.Time, bool) {
	t.Helper()
	s.block(t)
	buf.mark() // what the holder logged before the stall is not this window's
	h.node.mu.Lock()
	stopped := h.node.watchdog.Stop() // false: it fired already
	open, until := h.node.win.open, h.node.win.until
	h.node.mu.Unlock()
	if !stopped || !open {
		return time.Time{}, false
	}
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	return until, buf.line(t, watchdogMsg) == nil
}

// pastWindow opens a logged node with ttl and stalls it past its window
// (see stallPastWindow), on a fresh node if the machine was too slow, a
// few times at most. The stall is left armed.
func pastWindow(t *testing.T, ttl time.Duration) (*harness, *stall, *logBuffer, time.Time) {
	t.Helper()
	for try := 1; try <= 5; try++ {
		if h, s, buf, until, ok := tryPastWindow(t, ttl); ok {
			return h, s, buf, until
		}
	}
	t.Fatalf("the watchdog closed the gate before the test could stop it, 5 times: the machine is too slow for a %s window", ttl)
	return nil, nil, nil, time.Time{}
}

// tryPastWindow is one try of pastWindow; it closes the node unless it
// returns it (also when the stall fails the test).
func tryPastWindow(t *testing.T, ttl time.Duration) (h *harness, s *stall, buf *logBuffer, until time.Time, ok bool) {
	t.Helper()
	h, s, buf = openLogged(t, ttl)
	defer func() {
		if !ok {
			s.unblock()
			h.close()
		}
	}()
	until, ok = stallPastWindow(t, h, s, buf)
	return h, s, buf, until, ok
}

// validUntil is the line's valid_until; zero when it has none.
func validUntil(t *testing.T, line map[string]any) time.Time {
	t.Helper()
	s, _ := line["valid_until"].(string)
	if s == "" {
		return time.Time{}
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("valid_until %q: %v", s, err)
	}
	return v
}

const (
	lapsedMsg   = "lease: fenced: the window had run out before this renewal (was the process paused?)"
	closedMsg   = "lease: fenced: the gate is closed"
	watchdogMsg = "lease: fenced: the window ran out without a renewal; the gate is closed"
)

// A renewal that finds the window already over (the process was paused
// and this is its first renewal after resuming) logs the fence with the
// window's end, when the gate really closed, so a reader of the log does
// not take the late line's time for it.
func TestLapsedRenewalLineCarriesTheWindowsEnd(t *testing.T) {
	h, s, buf, until := pastWindow(t, 300*time.Millisecond)
	defer h.close()
	defer s.unblock()
	s.unblock()
	waitFor(t, func() bool { return buf.line(t, lapsedMsg) != nil })
	if got := validUntil(t, buf.line(t, lapsedMsg)); !got.Equal(until.Round(0)) {
		t.Errorf("%q: valid_until %v; want the window's end %v", lapsedMsg, got, until.Round(0))
	}
}

// A fence for a reason (leadership lost) logged when the window had
// already run out says when it ran out; one that closes an open window
// closes it as it is logged and has no valid_until.
func TestFenceLineCarriesTheWindowsEndOnlyWhenItHadRunOut(t *testing.T) {
	h, s, buf, until := pastWindow(t, 300*time.Millisecond)
	defer h.close()
	defer s.unblock()
	h.node.fence(fenceLeadershipLost, "test: leadership lost after the window ran out", true)
	if got := validUntil(t, buf.line(t, closedMsg)); !got.Equal(until.Round(0)) {
		t.Errorf("%q after the window ran out: valid_until %v; want the window's end %v", closedMsg, got, until.Round(0))
	}

	h2, _, buf2 := openLogged(t, 10*time.Second)
	defer h2.close()
	h2.node.fence(fenceLeadershipLost, "test: leadership lost while open", true)
	if line := buf2.line(t, closedMsg); line == nil || !validUntil(t, line).IsZero() {
		t.Errorf("%q while the window was open: %v; want the line without valid_until", closedMsg, line)
	}
}
