package imagecache

import (
	"bytes"
	"fmt"
	"github.com/siteboot/siteboot/internal/metrictest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// readyCache is a cache holding data, pulled from a test origin.
func readyCache(t *testing.T, cfg Config, data ...[]byte) *Cache {
	t.Helper()
	c := openCache(t, cfg)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		for i, b := range data {
			if r.URL.Path == fmt.Sprintf("/img%d", i) {
				serveBytes(w, r, b, "")
				return
			}
		}
		http.NotFound(w, r)
	})
	var ds [][32]byte
	for i, b := range data {
		d := digestOf(b)
		ds = append(ds, d)
		if err := c.Add(Want{URL: o.url(fmt.Sprintf("img%d", i)), SHA256: d, Format: "iso"}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runCache(t, c)
	waitReady(t, c, ds...)
	stop()
	return c
}

func TestServeRanges(t *testing.T) {
	const size = 4096
	data := testBytes(2, size)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	srv, client := serveCache(t, c)
	url := srv.URL + URLPath(d)
	etag := `"` + hexOf(d) + `"`
	type resp struct {
		Code          int
		ContentRange  string
		ContentLength string
		Body          []byte
	}
	full := resp{200, "", strconv.Itoa(size), data}
	part := func(s, e int) resp {
		return resp{206, fmt.Sprintf("bytes %d-%d/%d", s, e, size), strconv.Itoa(e - s + 1), data[s : e+1]}
	}
	unsat := resp{416, fmt.Sprintf("bytes */%d", size), "0", []byte{}}
	tests := []struct {
		name   string
		method string
		hdr    map[string]string
		want   resp
	}{
		{"whole", "GET", nil, full},
		{"first byte", "GET", map[string]string{"Range": "bytes=0-0"}, part(0, 0)},
		{"first 512 block", "GET", map[string]string{"Range": "bytes=0-511"}, part(0, 511)},
		{"second 512 block", "GET", map[string]string{"Range": "bytes=512-1023"}, part(512, 1023)},
		{"2048 block", "GET", map[string]string{"Range": "bytes=2048-4095"}, part(2048, 4095)},
		{"suffix", "GET", map[string]string{"Range": "bytes=-512"}, part(size-512, size-1)},
		{"open ended", "GET", map[string]string{"Range": "bytes=100-"}, part(100, size-1)},
		{"end clamped", "GET", map[string]string{"Range": "bytes=4000-9999"}, part(4000, size-1)},
		{"past end", "GET", map[string]string{"Range": fmt.Sprintf("bytes=%d-", size)}, unsat},
		{"zero suffix", "GET", map[string]string{"Range": "bytes=-0"}, unsat},
		{"malformed is ignored", "GET", map[string]string{"Range": "bytes=abc"}, full},
		{"reversed is ignored", "GET", map[string]string{"Range": "bytes=9-1"}, full},
		{"multiple ranges get the whole", "GET", map[string]string{"Range": "bytes=0-0,10-19"}, full},
		{"other unit", "GET", map[string]string{"Range": "pages=1-2"}, full},
		{"HEAD", "HEAD", nil, resp{200, "", strconv.Itoa(size), []byte{}}},
		{"HEAD ignores Range", "HEAD", map[string]string{"Range": "bytes=0-0"}, resp{200, "", strconv.Itoa(size), []byte{}}},
		{"If-Range matching", "GET", map[string]string{"Range": "bytes=0-9", "If-Range": etag}, part(0, 9)},
		{"If-Range other etag", "GET", map[string]string{"Range": "bytes=0-9", "If-Range": `"old"`}, full},
		{"If-Range weak", "GET", map[string]string{"Range": "bytes=0-9", "If-Range": "W/" + etag}, full},
		{"If-Range date", "GET", map[string]string{"Range": "bytes=0-9", "If-Range": "Mon, 02 Jan 2006 15:04:05 GMT"}, full},
		{"If-None-Match", "GET", map[string]string{"If-None-Match": etag}, resp{304, "", "", []byte{}}},
		{"If-None-Match weak", "GET", map[string]string{"If-None-Match": "W/" + etag}, resp{304, "", "", []byte{}}},
		{"If-None-Match other", "GET", map[string]string{"If-None-Match": `"x"`, "Range": "bytes=0-0"}, part(0, 0)},
		{"If-Match other", "GET", map[string]string{"If-Match": `"x"`}, resp{412, "", "0", []byte{}}},
		{"If-Match ours", "GET", map[string]string{"If-Match": etag, "Range": "bytes=1-1"}, part(1, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, body := get(t, client, tt.method, url, tt.hdr)
			got := resp{code, h.Get("Content-Range"), h.Get("Content-Length"), body}
			if got.Code == 304 {
				got.ContentLength = ""
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s %v (-want +got):\n%s", tt.method, tt.hdr, diff)
			}
			if code == 200 || code == 206 {
				hdr := map[string]string{"ETag": h.Get("ETag"), "Type": h.Get("Content-Type"), "Accept": h.Get("Accept-Ranges")}
				want := map[string]string{"ETag": etag, "Type": "application/octet-stream", "Accept": "bytes"}
				if diff := cmp.Diff(want, hdr); diff != "" {
					t.Errorf("headers (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestServeRefusals(t *testing.T) {
	data := testBytes(3, 100)
	c := readyCache(t, testConfig(t), data)
	srv, client := serveCache(t, c)
	unknown := digestOf([]byte("unknown"))
	type resp struct {
		Code  int
		Allow string
	}
	tests := []struct {
		name, method, path string
		want               resp
	}{
		{"unknown digest", "GET", URLPath(unknown), resp{Code: 404}},
		{"malformed path", "GET", "/cache/abc", resp{Code: 400}},
		{"upper-case digest", "GET", "/cache/" + fmt.Sprintf("%X", digestOf(data)), resp{Code: 400}},
		{"POST", "POST", URLPath(digestOf(data)), resp{Code: 405, Allow: "GET, HEAD"}},
		{"DELETE", "DELETE", URLPath(digestOf(data)), resp{Code: 405, Allow: "GET, HEAD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, _ := get(t, client, tt.method, srv.URL+tt.path, nil)
			if diff := cmp.Diff(tt.want, resp{code, h.Get("Allow")}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := metrictest.Counter(t, c.m.serve.Requests.WithLabelValues("404")); got != 1 {
		t.Errorf("requests_total{code=404} = %v, want 1", got)
	}
}

// readerFromRecorder is a ResponseWriter with ReadFrom, like net/http's,
// that records what the handler hands it.
type readerFromRecorder struct {
	*httptest.ResponseRecorder
	src io.Reader
}

func (r *readerFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.src = src
	return io.Copy(r.ResponseRecorder, src)
}

func TestServeHandsTheFileToReadFrom(t *testing.T) {
	data := testBytes(4, 10000)
	c := readyCache(t, testConfig(t), data)
	rec := &readerFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	req := httptest.NewRequest("GET", URLPath(digestOf(data)), nil)
	req.Header.Set("Range", "bytes=1000-2999")
	c.Handler().ServeHTTP(rec, req)
	if rec.Code != 206 || !bytes.Equal(rec.Body.Bytes(), data[1000:3000]) {
		t.Fatalf("got %d with %d bytes, want 206 with bytes 1000-2999", rec.Code, rec.Body.Len())
	}
	lr, ok := rec.src.(*io.LimitedReader)
	if !ok {
		t.Fatalf("ReadFrom got %T, want *io.LimitedReader over the file", rec.src)
	}
	if _, ok := lr.R.(*os.File); !ok {
		t.Errorf("ReadFrom's reader wraps %T, want *os.File (the sendfile path)", lr.R)
	}
	if got := metrictest.Counter(t, c.m.serve.BytesServed); got != 2000 {
		t.Errorf("bytes_served_total = %v, want 2000", got)
	}
}

// A Range of 200,000 overlapping one-byte ranges is 800 KB of header,
// inside net/http's default MaxHeaderBytes (1 MiB), so it reaches the
// handler, through net/http alone and through the fast path (which hands
// a head that large to net/http). The image comes back once, with 200.
func TestManyRangesGetTheWholeImage(t *testing.T) {
	data := testBytes(5, 1<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	_, fast := fastServer(t, c, ListenerConfig{})
	rng := "bytes=" + strings.Repeat("0-0,", 200_000)
	for name, addr := range map[string]string{"net/http": plainServer(t, c), "fast path": fast} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest("GET", "http://"+addr+URLPath(d), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Range", rng)
			start := time.Now()
			client := &http.Client{}
			defer client.CloseIdleConnections()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
			if took := time.Since(start); err != nil || took > 3*time.Second {
				t.Errorf("read the answer in %v: %v", took, err)
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
				t.Errorf("status %d with %d body bytes; want 200 with the %d-byte image", resp.StatusCode, len(body), len(data))
			}
		})
	}
}
