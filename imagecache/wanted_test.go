package imagecache

import (
	"context"
	"errors"
	"github.com/siteboot/siteboot/internal/metrictest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stateOf is the digests' states in Images order (by digest).
func statesOf(c *Cache) map[[32]byte]string {
	out := map[[32]byte]string{}
	for _, in := range c.Images() {
		s := in.State.String()
		if in.Listed {
			s += "+listed"
		}
		if in.Added {
			s += "+added"
		}
		out[in.SHA256] = s
	}
	return out
}

func TestSetWantedIsDeclarative(t *testing.T) {
	a, b := testBytes(30, 1000), testBytes(31, 1000)
	da, db := digestOf(a), digestOf(b)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/a" {
			serveBytes(w, r, a, "")
			return
		}
		serveBytes(w, r, b, "")
	})
	c := openCache(t, testConfig(t))
	wa, wb := Want{URL: o.url("a"), SHA256: da}, Want{URL: o.url("b"), SHA256: db}

	if err := c.SetWanted([]Want{wa, {URL: "ftp://x/y", SHA256: db}}); err == nil || !strings.Contains(err.Error(), "cache_images[1]") {
		t.Fatalf("SetWanted with an invalid want = %v, want an error naming cache_images[1]", err)
	}
	if n := len(c.Images()); n != 0 {
		t.Fatalf("an invalid SetWanted changed the state: %d images", n)
	}
	if err := c.SetWanted([]Want{wa, wa}); err != nil {
		t.Fatal(err)
	}
	stop := runCache(t, c)
	waitReady(t, c, da)
	stop()
	if err := c.SetWanted([]Want{wb}); err != nil { // a released; b queued (Run stopped)
		t.Fatal(err)
	}
	want := map[[32]byte]string{da: "ready", db: "queued+listed"}
	if diff := cmp.Diff(want, statesOf(c)); diff != "" {
		t.Errorf("after the spec changed (-want +got):\n%s", diff)
	}
	if err := c.SetWanted(nil); err != nil { // b dropped: it held nothing
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[[32]byte]string{da: "ready"}, statesOf(c)); diff != "" {
		t.Errorf("after the spec emptied (-want +got):\n%s", diff)
	}
}

// stalled is an origin whose first answer hangs until the client leaves.
func stalled(data []byte) func(w http.ResponseWriter, r *http.Request, n int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		if n > 0 {
			serveBytes(w, r, data, "")
			return
		}
		w.Header().Set("Content-Length", "100000")
		w.Write(data[:100])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

func TestDroppingAPullCancelsIt(t *testing.T) {
	data := testBytes(32, 100000)
	d := digestOf(data)
	o := newOrigin(t, stalled(data))
	c := openCache(t, testConfig(t))
	if err := c.SetWanted([]Want{{URL: o.url("x"), SHA256: d}}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitFor(t, func() bool { return len(o.requests()) == 1 && c.Images()[0].State == StatePulling })
	if err := c.SetWanted(nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.Images()) == 0 })
	if names := dirNames(t, c.ingestDir); len(names) != 0 {
		t.Errorf("a cancelled pull left %v", names)
	}
	if got := metrictest.Counter(t, c.m.pulls.WithLabelValues("cancelled")); got != 1 {
		t.Errorf("pulls_total{cancelled} = %v, want 1", got)
	}
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20 s")
		}
	}
}

type pinSet map[[32]byte]bool

func (p pinSet) Pinned(d [32]byte) bool { return p[d] }

func TestRemove(t *testing.T) {
	spec, added, pinned := testBytes(33, 100), testBytes(34, 100), testBytes(35, 100)
	cfg := testConfig(t)
	cfg.Pins = pinSet{digestOf(pinned): true}
	c := readyCache(t, cfg, added, pinned, spec) // all added
	if err := c.SetWanted([]Want{{URL: "http://o/spec", SHA256: digestOf(spec)}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		d    [32]byte
		want error
	}{
		{"in the site spec", digestOf(spec), ErrWanted},
		{"pinned", digestOf(pinned), ErrPinned},
		{"unknown", digestOf([]byte("nope")), ErrNotFound},
		{"added", digestOf(added), nil},
		{"removed twice", digestOf(added), ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Remove(tt.d)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Errorf("Remove = %v, want %v", err, tt.want)
			}
		})
	}
	if fileExists(c.blobPath(digestOf(added))) {
		t.Errorf("the removed image's blob is still there")
	}
	want := map[[32]byte]string{digestOf(spec): "ready+listed+added", digestOf(pinned): "ready+added"}
	if diff := cmp.Diff(want, statesOf(c)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAddRetriesAFailedImage(t *testing.T) {
	data := testBytes(36, 1000)
	d := digestOf(data)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			http.NotFound(w, r)
			return
		}
		serveBytes(w, r, data, "")
	})
	c := openCache(t, testConfig(t))
	w := Want{URL: o.url("x"), SHA256: d}
	if err := c.Add(w); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	var fe *FailedError
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Wait(ctx, d); !errors.As(err, &fe) || fe.SHA256 != d || !strings.Contains(fe.Error(), "404") {
		t.Fatalf("Wait = %v, want a FailedError naming the image and the 404", err)
	}
	if err := c.Add(w); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, d)
	if got := c.Images()[0].Reason; got != "" {
		t.Errorf("reason after success = %q", got)
	}
}

func TestWaitErrors(t *testing.T) {
	data := testBytes(37, 100)
	c := openCache(t, testConfig(t))
	d := digestOf(data)
	if err := c.Add(Want{URL: "http://127.0.0.1:1/x", SHA256: d}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait on a queued image without Run = %v, want the deadline", err)
	}
	if err := c.Wait(context.Background(), digestOf([]byte("?"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("Wait on an unknown image = %v, want ErrNotFound", err)
	}
	if err := c.Wait(context.Background()); err != nil {
		t.Errorf("Wait on nothing = %v", err)
	}
}

func TestRetryFailedAfterInterval(t *testing.T) {
	data := testBytes(38, 100)
	d := digestOf(data)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			http.Error(w, "gone", http.StatusGone)
			return
		}
		serveBytes(w, r, data, "")
	})
	cfg := testConfig(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock = struct{ t time.Time }{now}
	cfg.Now = func() time.Time { return clock.t }
	cfg.FlushInterval = 10 * time.Millisecond
	c := openCache(t, cfg)
	if err := c.SetWanted([]Want{{URL: o.url("x"), SHA256: d}}); err != nil {
		t.Fatal(err)
	}
	stop := runCache(t, c)
	waitFailed(t, c, d)
	time.Sleep(50 * time.Millisecond) // ticks before the interval: still failed
	if got := c.Images()[0].State; got != StateFailed {
		t.Fatalf("state before RetryFailed = %v", got)
	}
	stop()
	clock.t = now.Add(time.Hour)
	runCache(t, c)
	waitFor(t, func() bool { return c.Ready(d) })
}

func TestRetryNow(t *testing.T) {
	data := testBytes(39, 100)
	d := digestOf(data)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			http.Error(w, "gone", http.StatusGone)
			return
		}
		serveBytes(w, r, data, "")
	})
	c := openCache(t, testConfig(t))
	if err := c.SetWanted([]Want{{URL: o.url("x"), SHA256: d}}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitFailed(t, c, d)
	if err := c.Retry(d); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Ready(d) })
	if err := c.Retry(digestOf([]byte("nope"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Retry of an unknown digest = %v, want ErrNotFound", err)
	}
	// Retrying a ready image changes nothing.
	if err := c.Retry(d); err != nil || !c.Ready(d) {
		t.Fatalf("Retry of a ready image = %v, ready %t", err, c.Ready(d))
	}
}

// An image released while it pulls (which cancels the pull) and wanted
// again before the pull has stopped goes on: queued again, resumed from
// its checkpoint, ready. Before, the cancelled pull was recorded as a
// failure ("context canceled") and its data deleted, and the image waited
// for the failed-retry delay.
func TestWantedAgainWhilePullStops(t *testing.T) {
	data := testBytes(33, 100000)
	d := digestOf(data)
	o := newOrigin(t, stalled(data))
	c := openCache(t, testConfig(t))
	w := []Want{{URL: o.url("x"), SHA256: d}}
	if err := c.SetWanted(w); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitFor(t, func() bool { return len(o.requests()) == 1 && c.Images()[0].State == StatePulling })
	if err := c.SetWanted(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWanted(w); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, d)
	if got := metrictest.Counter(t, c.m.pulls.WithLabelValues("failed")); got != 0 {
		t.Errorf("pulls_total{failed} = %v, want 0", got)
	}
}
