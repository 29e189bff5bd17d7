package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/logbuf"
)

// failingStore has every image ready and none of their files openable, as
// when a flood of connections has used up the process's descriptors.
type failingStore struct{}

func (failingStore) Acquire([32]byte) (Blob, bool, error) {
	return Blob{}, false, fmt.Errorf("open blob: %w", syscall.EMFILE)
}
func (failingStore) AcquireShared([32]byte) (Blob, bool, error) {
	return Blob{}, false, errors.New("unused")
}
func (failingStore) Pending([32]byte) bool { return false }

// A blob that cannot be opened gets every request a 500, and the log a
// few Error lines and then one per interval saying how many it stands
// for, not a line per request (a connection flood wrote one per request).
func TestOpenFailuresLogRateLimited(t *testing.T) {
	var logs logbuf.Buffer
	s := New(Config{Store: failingStore{}, RetryAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	path := PathPrefix + strings.Repeat("ab", 32)
	get := func() {
		t.Helper()
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500", rec.Code)
		}
	}
	for range 1000 {
		get()
	}
	got := logs.Lines()
	if len(got) != failureBurst {
		t.Fatalf("%d log lines for 1,000 failed requests, want %d:\n%s", len(got), failureBurst, strings.Join(got, "\n"))
	}
	for _, l := range got {
		if !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "too many open files") || !strings.Contains(l, "sha256="+strings.Repeat("ab", 32)) {
			t.Errorf("line %q: want an Error naming the cause and the image", l)
		}
	}
	now = now.Add(failureEvery)
	get()
	got = logs.Lines()
	want := "suppressed=" + "997"
	if len(got) != failureBurst+1 || !strings.Contains(got[len(got)-1], want) {
		t.Fatalf("after %v: lines %q, want one more with %s", failureEvery, got, want)
	}

	// The tail of a flood: its count is written when the limit allows a
	// line again, or at shutdown, not lost when the failures stop.
	for range 5 {
		get()
	}
	s.FlushLogs(false)
	if n := len(logs.Lines()); n != failureBurst+1 {
		t.Fatalf("FlushLogs within the interval wrote %d lines", n-failureBurst-1)
	}
	s.FlushLogs(true)
	got = logs.Lines()
	if len(got) != failureBurst+2 || !strings.Contains(got[len(got)-1], "suppressed=5") || !strings.Contains(got[len(got)-1], "kind=open") {
		t.Fatalf("at shutdown: lines %q, want one more with kind=open and suppressed=5", got)
	}
}

// However many images fail at once, the lines written and the counts of
// those held back add up to the failed requests (a limiter per image lost
// the counts of all but its first 64).
func TestOpenFailuresCountedAcrossImages(t *testing.T) {
	var logs logbuf.Buffer
	s := New(Config{Store: failingStore{}, RetryAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: NewMetrics()})
	const images, each = 70, 10
	for i := range images {
		path := PathPrefix + fmt.Sprintf("%064x", i+1)
		for range each {
			s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
		}
	}
	s.FlushLogs(true)
	total := 0
	for _, l := range logs.Lines() {
		switch {
		case strings.Contains(l, "msg=\"imagecache: open blob\""):
			total++
		case strings.Contains(l, "lines suppressed"):
			i := strings.Index(l, "suppressed=")
			n, err := strconv.Atoi(strings.Fields(l[i+len("suppressed="):])[0])
			if err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			total += n
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	if total != images*each {
		t.Errorf("lines and counts add up to %d, want %d:\n%s", total, images*each, logs.String())
	}
}
