package httpfile

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testETag = `"0123abcd"`

// testFile is size bytes of a repeating pattern in a temporary file.
func testFile(t *testing.T, size int) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func serveFile(t *testing.T, path string, size int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		Serve(w, r, f, size, testETag)
	})
}

func TestServe(t *testing.T) {
	const size = 3000
	path, data := testFile(t, size)
	srv := httptest.NewServer(serveFile(t, path, size))
	defer srv.Close()
	type answer struct {
		Code                              int
		ContentRange, ContentLength, ETag string
		Body                              []byte
	}
	whole := answer{200, "", strconv.Itoa(size), testETag, data}
	part := func(s, e int) answer {
		return answer{206, fmt.Sprintf("bytes %d-%d/%d", s, e, size), strconv.Itoa(e - s + 1), testETag, data[s : e+1]}
	}
	for _, tc := range []struct {
		name, method string
		hdr          map[string]string
		want         answer
	}{
		{"whole", "GET", nil, whole},
		{"one range", "GET", map[string]string{"Range": "bytes=10-19"}, part(10, 19)},
		{"suffix", "GET", map[string]string{"Range": "bytes=-5"}, part(size-5, size-1)},
		{"two ranges in order", "GET", map[string]string{"Range": "bytes=0-9,20-29"}, whole},
		{"overlapping ranges", "GET", map[string]string{"Range": "bytes=0-0,0-0,0-0"}, whole},
		{"past the end", "GET", map[string]string{"Range": "bytes=3000-"}, answer{416, "bytes */3000", "0", testETag, []byte{}}},
		{"head", "HEAD", map[string]string{"Range": "bytes=0-0"}, answer{200, "", strconv.Itoa(size), testETag, []byte{}}},
		{"if-none-match", "GET", map[string]string{"If-None-Match": testETag}, answer{304, "", "", testETag, []byte{}}},
		{"if-match other", "GET", map[string]string{"If-Match": `"x"`}, answer{412, "", "0", testETag, []byte{}}},
		{"if-range other", "GET", map[string]string{"Range": "bytes=0-0", "If-Range": `"x"`}, whole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			got := answer{resp.StatusCode, resp.Header.Get("Content-Range"), resp.Header.Get("Content-Length"), resp.Header.Get("ETag"), body}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// readerFromRecorder is a ResponseWriter with ReadFrom, like net/http's,
// that records what Serve hands it.
type readerFromRecorder struct {
	*httptest.ResponseRecorder
	src io.Reader
}

func (r *readerFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.src = src
	return io.Copy(r.ResponseRecorder, src)
}

func TestServeHandsTheFileToReadFrom(t *testing.T) {
	path, data := testFile(t, 5000)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := &readerFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	req := httptest.NewRequest("GET", "/f", nil)
	req.Header.Set("Range", "bytes=1000-2999")
	code, sent, err := Serve(rec, req, f, 5000, testETag)
	if code != 206 || sent != 2000 || err != nil || !bytes.Equal(rec.Body.Bytes(), data[1000:3000]) {
		t.Fatalf("Serve = %d, %d, %v with %d body bytes; want 206 and bytes 1000-2999", code, sent, err, rec.Body.Len())
	}
	lr, ok := rec.src.(*io.LimitedReader)
	if !ok || lr.R != f {
		t.Errorf("ReadFrom got %T, want an *io.LimitedReader over the *os.File (the sendfile path)", rec.src)
	}
}
