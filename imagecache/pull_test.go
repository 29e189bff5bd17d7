package imagecache

import (
	"bytes"
	"context"
	"github.com/siteboot/siteboot/internal/logbuf"
	"github.com/siteboot/siteboot/internal/metrictest"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestPullCommitsVerifiedBlob(t *testing.T) {
	data := testBytes(10, 300<<10)
	d := digestOf(data)
	var logs logbuf.Buffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := openCache(t, cfg)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, `"v1"`) })
	if err := c.Add(Want{URL: o.url("img.iso?sig=s3cret"), SHA256: d, Format: "iso", ImageID: "img_1"}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitReady(t, c, d)

	got, err := os.ReadFile(c.blobPath(d))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("blob: %d bytes, err %v; want the image", len(got), err)
	}
	if fi, _ := os.Stat(c.blobPath(d)); fi.Mode().Perm() != 0o444 {
		t.Errorf("blob mode %v, want 0444", fi.Mode().Perm())
	}
	if names := dirNames(t, c.ingestDir); len(names) != 0 {
		t.Errorf("ingest holds %v after the commit", names)
	}
	infos := c.Images()
	for i := range infos {
		infos[i].LastUsed = time.Time{}
	}
	want := []Info{{SHA256: d, URL: o.url("img.iso") + "?…", ImageID: "img_1", Format: "iso",
		State: StateReady, Size: int64(len(data)), Added: true}}
	if diff := cmp.Diff(want, infos); diff != "" {
		t.Errorf("Images (-want +got):\n%s", diff)
	}
	if got := metrictest.Counter(t, c.m.pulls.WithLabelValues("ok")); got != 1 {
		t.Errorf("pulls_total{ok} = %v, want 1", got)
	}
	if got := metrictest.Counter(t, c.m.pullBytes); got != float64(len(data)) {
		t.Errorf("pull_bytes_total = %v, want %d", got, len(data))
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the logs carry the URL's query:\n%s", logs.String())
	}
	if !c.Ready(d) || c.Ready(digestOf([]byte("other"))) {
		t.Errorf("Ready: want true for the image only")
	}
}

// resumeRange writes "bytes=K-" with 0 < K <= max as "bytes=resume-": how
// much of a cut response reached the cache depends on the server's buffers.
func resumeRange(h string, max int64) string {
	k, ok := strings.CutPrefix(h, "bytes=")
	if !ok || !strings.HasSuffix(k, "-") {
		return h
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(k, "-"), 10, 64)
	if err != nil || n <= 0 || n > max {
		return h
	}
	return "bytes=resume-"
}

// stripIfRange makes an origin that ignores If-Range.
func stripIfRange(r *http.Request) { r.Header.Del("If-Range") }

func TestPullLyingOrigin(t *testing.T) {
	const cut = 100 << 10
	data := testBytes(11, 256<<10)
	flipped := bytes.Clone(data)
	flipped[200<<10] ^= 1
	longer := append(bytes.Clone(data), testBytes(12, 1000)...)
	type result struct {
		State  State
		Reason string // a substring
		Ranges []string
	}
	tests := []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request, n int)
		want  result
	}{
		{
			name:  "flipped byte",
			serve: func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, flipped, `"v1"`) },
			want:  result{StateFailed, "sha256 mismatch", []string{""}},
		},
		{
			name: "size changes on resume",
			serve: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveCut(w, r, data, `"v1"`, cut)
					return
				}
				stripIfRange(r)
				serveBytes(w, r, longer, `"v1"`)
			},
			want: result{StateFailed, "sha256 mismatch", []string{"", "bytes=resume-", ""}},
		},
		{
			name: "etag changes, If-Range honoured",
			serve: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveCut(w, r, data, `"v1"`, cut)
					return
				}
				serveBytes(w, r, flipped, `"v2"`)
			},
			want: result{StateFailed, "sha256 mismatch", []string{"", "bytes=resume-"}},
		},
		{
			name: "etag changes, If-Range ignored",
			serve: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveCut(w, r, data, `"v1"`, cut)
					return
				}
				stripIfRange(r)
				serveBytes(w, r, flipped, `"v2"`)
			},
			want: result{StateFailed, "sha256 mismatch", []string{"", "bytes=resume-", ""}},
		},
		{
			name: "same etag, other bytes, then honest",
			serve: func(w http.ResponseWriter, r *http.Request, n int) {
				switch n {
				case 0:
					serveCut(w, r, data, `"v1"`, cut)
				case 1:
					serveBytes(w, r, flipped, `"v1"`)
				default:
					serveBytes(w, r, data, `"v1"`)
				}
			},
			want: result{StateReady, "", []string{"", "bytes=resume-", ""}},
		},
		{
			name: "honest resume",
			serve: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveCut(w, r, data, `"v1"`, cut)
					return
				}
				serveBytes(w, r, data, `"v1"`)
			},
			want: result{StateReady, "", []string{"", "bytes=resume-"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t, testConfig(t))
			o := newOrigin(t, tt.serve)
			d := digestOf(data)
			if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
				t.Fatal(err)
			}
			srv, client := serveCache(t, c)
			stop := runCache(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.Wait(ctx, d)
			stop()
			info := c.Images()[0]
			got := result{State: info.State, Reason: tt.want.Reason, Ranges: nil}
			if !strings.Contains(info.Reason, tt.want.Reason) {
				got.Reason = info.Reason
			}
			for _, r := range o.requests() {
				got.Ranges = append(got.Ranges, resumeRange(r.Range, cut))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			code, _, body := get(t, client, "GET", srv.URL+URLPath(d), nil)
			switch {
			case tt.want.State == StateReady && (code != 200 || !bytes.Equal(body, data)):
				t.Errorf("GET = %d with %d bytes, want 200 with the image", code, len(body))
			case tt.want.State == StateFailed && code != 404:
				t.Errorf("GET of a failed image = %d, want 404", code)
			}
			if tt.want.State == StateFailed {
				if n := append(dirNames(t, c.blobDir), dirNames(t, c.ingestDir)...); len(n) != 0 {
					t.Errorf("a failed pull left %v", n)
				}
			}
		})
	}
}

func TestPullRetries(t *testing.T) {
	data := testBytes(13, 1000)
	tests := []struct {
		name     string
		status   []int // answers before the image, by request
		retries  int
		state    State
		reason   string
		requests int
		waits    []time.Duration
	}{
		{"503 twice then ok", []int{503, 503}, 5, StateReady, "", 3, []time.Duration{time.Second, 2 * time.Second}},
		{"429 then ok", []int{429}, 5, StateReady, "", 2, []time.Duration{time.Second}},
		{"404 is final", []int{404}, 5, StateFailed, "origin answered 404 Not Found", 1, nil},
		{"403 is final", []int{403}, 5, StateFailed, "origin answered 403 Forbidden", 1, nil},
		{"gives up", []int{500, 500, 500, 500}, 2, StateFailed, "origin answered 500 Internal Server Error (after 3 attempts)", 3,
			[]time.Duration{time.Second, 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := &noSleep{}
			cfg := testConfig(t)
			cfg.Sleep, cfg.Retries = ns.sleep, tt.retries
			c := openCache(t, cfg)
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n < len(tt.status) {
					http.Error(w, "no", tt.status[n])
					return
				}
				serveBytes(w, r, data, "")
			})
			d := digestOf(data)
			if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
				t.Fatal(err)
			}
			stop := runCache(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.Wait(ctx, d)
			stop()
			info := c.Images()[0]
			type result struct {
				State    State
				Reason   string
				Requests int
				Waits    []time.Duration
			}
			want := result{tt.state, tt.reason, tt.requests, tt.waits}
			got := result{info.State, info.Reason, len(o.requests()), ns.waits}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPullResumesAfterRestart stops Run in the middle of a pull and checks
// that the next Open and Run continue from the checkpoint.
func TestPullResumesAfterRestart(t *testing.T) {
	data := testBytes(14, 1<<20)
	d := digestOf(data)
	const sent = 600 << 10
	const seen = 512 << 10
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n > 0 {
			serveBytes(w, r, data, `"v1"`)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", "1048576")
		w.Write(data[:sent])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // hang until the cache gives up
	})
	cfg := testConfig(t)
	c := openCache(t, cfg)
	if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
		t.Fatal(err)
	}
	stop := runCache(t, c)
	deadline := time.Now().Add(20 * time.Second)
	for c.Images()[0].Done < seen && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !fileExists(c.ckptPath(d)) || !fileExists(c.partPath(d)) {
		t.Fatalf("no checkpoint after an interrupted pull: ingest holds %v", dirNames(t, c.ingestDir))
	}

	cfg.Metrics = prometheus.NewRegistry()
	c2 := openCache(t, cfg)
	if got := c2.Images()[0].State; got != StateQueued {
		t.Fatalf("state after reopening = %v, want queued", got)
	}
	runCache(t, c2)
	waitReady(t, c2, d)
	reqs := o.requests()
	for i := range reqs {
		if r := reqs[i].Range; r != "" && resumeRange(r, seen-1) == r {
			reqs[i].Range = resumeRange(r, sent) // at least seen: "bytes=resume-"
		}
	}
	want := []originReq{{}, {Range: "bytes=resume-", IfRange: `"v1"`}}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Errorf("origin requests (-want +got):\n%s", diff)
	}
}

func TestPullStallTimeout(t *testing.T) {
	data := testBytes(15, 200<<10)
	d := digestOf(data)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n > 0 {
			serveBytes(w, r, data, `"v1"`)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", "204800")
		w.Write(data[:1000])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	cfg := testConfig(t)
	cfg.StallTimeout = 300 * time.Millisecond
	c := openCache(t, cfg)
	if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitReady(t, c, d)
	// On a loaded machine a later request may stall too; the first two tell.
	if diff := cmp.Diff([]originReq{{}, {Range: "bytes=1000-", IfRange: `"v1"`}}, o.requests()[:2]); diff != "" {
		t.Errorf("origin requests (-want +got):\n%s", diff)
	}
}

func TestPullRefusesHTTPSToHTTPRedirect(t *testing.T) {
	data := testBytes(16, 100)
	plain := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, "") })
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.url("img"), http.StatusFound)
	}))
	t.Cleanup(tlsSrv.Close)
	client := tlsSrv.Client()
	t.Cleanup(client.CloseIdleConnections)
	cfg := testConfig(t)
	cfg.HTTPClient, cfg.Retries = client, 1
	c := openCache(t, cfg)
	d := digestOf(data)
	if err := c.Add(Want{URL: tlsSrv.URL + "/img", SHA256: d}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	reason := waitFailed(t, c, d)
	if !strings.Contains(reason, "redirect from https to http refused") {
		t.Errorf("reason %q, want the refused redirect", reason)
	}
	if n := len(plain.requests()); n != 0 {
		t.Errorf("the http origin got %d requests", n)
	}
}

func TestPullLargerThanCapacity(t *testing.T) {
	data := testBytes(17, 5000)
	tests := []struct {
		name    string
		chunked bool
	}{{"size announced", false}, {"size unknown", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if tt.chunked {
					w.Write(data[:10])
					w.(http.Flusher).Flush()
					w.Write(data[10:])
					return
				}
				serveBytes(w, r, data, "")
			})
			cfg := testConfig(t)
			cfg.Capacity = 4000
			c := openCache(t, cfg)
			d := digestOf(data)
			if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
				t.Fatal(err)
			}
			runCache(t, c)
			reason := waitFailed(t, c, d)
			if !strings.Contains(reason, "larger than the cache capacity of 4000 bytes") {
				t.Errorf("reason %q", reason)
			}
			if names := dirNames(t, filepath.Join(c.dir, "ingest")); len(names) != 0 {
				t.Errorf("ingest holds %v", names)
			}
		})
	}
}
