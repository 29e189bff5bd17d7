package serve

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/siteboot/siteboot/internal/httpfile"
)

const testTarget = "/cache/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseHead(t *testing.T) {
	for _, tc := range []struct {
		head string
		ok   bool
		want reqHead
	}{
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\n\r\n", true, reqHead{get: true}},
		{"HEAD " + testTarget + " HTTP/1.1\r\nhost:a\r\nConnection: Keep-Alive, close\r\n\r\n", true, reqHead{close: true}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nRange:bytes=1-2 \r\nIf-Range: \"x\"\r\nIf-Match: *\r\nIf-None-Match: \"y\"\r\nX-Other: ok\r\n\r\n", true,
			reqHead{get: true, conds: httpfile.Conds{Range: "bytes=1-2", NRange: 1, IfRange: `"x"`, NIfRange: 1, IfMatch: "*", IfNoneMatch: `"y"`}}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nUser-Agent: iPXE/1.21.1+ (g988d2)\r\nConnection: keep-alive\r\n\r\n", true, reqHead{get: true}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nIf-Match: *\r\nIf-Match: *\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a b\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nConnection: close, te\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\n: empty name\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nX-Bad: a\x00b\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nX-B\xffd: 1\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + "  HTTP/1.1\r\nHost: a\r\n\r\n", false, reqHead{}},
		{"GET  " + testTarget + " HTTP/1.1\r\nHost: a\r\n\r\n", false, reqHead{}},
		{"get " + testTarget + " HTTP/1.1\r\nHost: a\r\n\r\n", false, reqHead{}},
		{"GET " + testTarget + " HTTP/1.2\r\nHost: a\r\n\r\n", false, reqHead{}},
		{"GET http://a" + testTarget + " HTTP/1.1\r\nHost: a\r\n\r\n", false, reqHead{}},
	} {
		got, ok := parseHead([]byte(tc.head))
		if ok != tc.ok {
			t.Errorf("%q: ok = %t, want %t", tc.head, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		tc.want.digest, _ = ParsePath(testTarget)
		if got != tc.want {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.head, got, tc.want)
		}
	}
}

func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		in, head string
		err      string // "" none, "too big", or "read" for the reader's error
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", ""},
		{"GET / HTTP/1.1\nHost: a\n\nrest", "GET / HTTP/1.1\nHost: a\n\n", ""},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", "GET / HTTP/1.1\r\nHost: a\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: a\r\n", "", "read"},
		{"GET / HTTP/1.1\r\nX: " + strings.Repeat("x", readBufSize) + "\r\n\r\n", "", "too big"},
	} {
		br := bufio.NewReaderSize(&oneByteReader{r: strings.NewReader(tc.in)}, readBufSize)
		head, err := readHead(br)
		got := ""
		switch {
		case err == errTooBig:
			got = "too big"
		case err != nil:
			got = "read"
		}
		if string(head) != tc.head || got != tc.err {
			t.Errorf("%.40q: head %q, err %v; want %q, %v", tc.in, head, err, tc.head, tc.err)
		}
		if err == nil && br.Buffered() < len(head) {
			t.Errorf("%.40q: head consumed", tc.in)
		}
	}
}

// oneByteReader makes readHead assemble a head across many reads.
type oneByteReader struct{ r *strings.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// Whatever parseHead accepts, net/http reads as the same request: the same
// method, target, host, conditional headers and persistence, no body, and
// the head ends at the same byte.
func FuzzParseHead(f *testing.F) {
	f.Add([]byte("GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nRange: bytes=0-9\r\n\r\n"))
	f.Add([]byte("HEAD " + testTarget + " HTTP/1.1\r\nHost: a\r\nConnection: close\r\nIf-Range: \"x\"\r\n\r\n"))
	f.Add([]byte("GET " + testTarget + " HTTP/1.1\r\nHost: a\r\nIf-Match: *\r\nIf-None-Match: W/\"a\"\r\n\r\n"))
	f.Add([]byte("GET " + testTarget + " HTTP/1.1\nHost: a\n\n"))
	f.Add([]byte("GET " + testTarget + " HTTP/1.1\r\nHost: [::1]:80\r\nX-A: b\xff\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		n := headEnd(in, 0)
		if n == 0 {
			return
		}
		h, ok := parseHead(in[:n])
		if !ok {
			return
		}
		br := bufio.NewReader(bytes.NewReader(in))
		r, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("parseHead took %q, net/http refuses it: %v", in[:n], err)
		}
		if br.Buffered() != len(in)-n {
			t.Fatalf("%q: net/http read a %d-byte head, parseHead %d", in, len(in)-br.Buffered(), n)
		}
		wantMethod := http.MethodHead
		if h.get {
			wantMethod = http.MethodGet
		}
		d, err := ParsePath(r.URL.Path)
		switch {
		case r.Method != wantMethod:
			t.Fatalf("%q: method %s, parseHead %s", in, r.Method, wantMethod)
		case err != nil || d != h.digest || r.URL.RawQuery != "" || r.RequestURI != URLPath(d):
			t.Fatalf("%q: target %q, parseHead %x", in, r.RequestURI, h.digest)
		case r.ProtoMajor != 1 || r.ProtoMinor != 1:
			t.Fatalf("%q: %s", in, r.Proto)
		case r.Close != h.close:
			t.Fatalf("%q: net/http close %t, parseHead %t", in, r.Close, h.close)
		case r.ContentLength != 0 || len(r.TransferEncoding) != 0:
			t.Fatalf("%q: a body: length %d, encoding %v", in, r.ContentLength, r.TransferEncoding)
		case len(r.Header.Values("Host")) > 0:
			t.Fatalf("%q: net/http kept Host in the header map", in)
		}
		if got := httpfile.CondsOf(r.Header); got != h.conds {
			t.Fatalf("%q: net/http conds %+v, parseHead %+v", in, got, h.conds)
		}
	})
}
