package imagecache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/siteboot/siteboot/internal/metrictest"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fastServer serves c's Handler on PathPrefix, and "other" on /other,
// through a fast-path Listener on loopback, as the appliance does.
func fastServer(t *testing.T, c *Cache, cfg ListenerConfig) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := c.Listener(ln, cfg)
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, c.Handler())
	mux.HandleFunc("/other", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "other\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if cfg.ReadHeaderTimeout > 0 {
		srv.ReadHeaderTimeout = cfg.ReadHeaderTimeout
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(fl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := fl.Shutdown(ctx); err != nil {
			t.Errorf("fast path shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return fl, ln.Addr().String()
}

// plainServer serves the same routes through net/http alone.
func plainServer(t *testing.T, c *Cache) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, c.Handler())
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// dial connects to addr for the rest of the test, 10 s at most.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}

// exchange writes raw on a new connection and reads one response.
func exchange(t *testing.T, addr, raw string) (*http.Response, []byte) {
	t.Helper()
	conn := dial(t, addr)
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, bufio.NewReader(conn), raw)
}

func readResponse(t *testing.T, br *bufio.Reader, raw string) (*http.Response, []byte) {
	t.Helper()
	method := strings.Fields(raw)[0]
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: read response: %v", raw, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: read body: %v", raw, err)
	}
	return resp, body
}

// comparable is a response without its Date.
type comparable struct {
	Status string
	Header http.Header
	Body   []byte
}

func compared(resp *http.Response, body []byte) comparable {
	h := resp.Header.Clone()
	if _, err := http.ParseTime(h.Get("Date")); err != nil {
		h.Set("Date", "invalid: "+h.Get("Date"))
	} else {
		h.Del("Date")
	}
	return comparable{resp.Status, h, body}
}

// The fast path answers exactly as net/http and Handler do, for requests it
// takes and requests it hands over alike.
func TestFastPathMatchesNetHTTP(t *testing.T) {
	const size = 10000
	data := testBytes(7, size)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	_, fast := fastServer(t, c, ListenerConfig{})
	plain := plainServer(t, c)
	p := URLPath(d)
	etag := `"` + hexOf(d) + `"`
	req := func(method, target string, hdr ...string) string {
		return method + " " + target + " HTTP/1.1\r\nHost: siteboot\r\n" + strings.Join(hdr, "") + "\r\n"
	}
	unknown := URLPath(digestOf([]byte("not here")))
	for _, tc := range []struct {
		name string
		raw  string
		fast bool // answered without net/http
	}{
		{"whole", req("GET", p), true},
		{"head", req("HEAD", p), true},
		{"range", req("GET", p, "Range: bytes=0-511\r\n"), true},
		{"range mid", req("GET", p, "Range: bytes=4096-8191\r\n"), true},
		{"range open", req("GET", p, "Range: bytes=9000-\r\n"), true},
		{"range past end clipped", req("GET", p, "Range: bytes=9990-20000\r\n"), true},
		{"suffix", req("GET", p, "Range: bytes=-100\r\n"), true},
		{"suffix larger than image", req("GET", p, "Range: bytes=-20000\r\n"), true},
		{"range with blanks and case", req("GET", p, "rAnGe:   BYTES=10-19 \t\r\n"), true},
		{"head with range", req("HEAD", p, "Range: bytes=0-1\r\n"), true},
		{"two ranges: whole image", req("GET", p, "Range: bytes=0-1,5-6\r\n"), true},
		{"malformed range: whole image", req("GET", p, "Range: bytes=x-1\r\n"), true},
		{"other unit", req("GET", p, "Range: pages=1-2\r\n"), true},
		{"if-range matches", req("GET", p, "Range: bytes=0-9\r\n", "If-Range: "+etag+"\r\n"), true},
		{"if-range stale", req("GET", p, "Range: bytes=0-9\r\n", "If-Range: \"0000\"\r\n"), true},
		{"if-range date", req("GET", p, "Range: bytes=0-9\r\n", "If-Range: Sat, 29 Oct 1994 19:43:31 GMT\r\n"), true},
		{"if-match ok", req("GET", p, "If-Match: \"a\", "+etag+"\r\n"), true},
		{"if-none-match other", req("GET", p, "If-None-Match: \"a\"\r\n"), true},
		{"connection close", req("GET", p, "Connection: close\r\n"), true},
		{"connection keep-alive", req("GET", p, "Connection: keep-alive\r\n"), true},
		{"unsatisfiable", req("GET", p, "Range: bytes=10000-\r\n"), false},
		{"zero suffix", req("GET", p, "Range: bytes=-0\r\n"), false},
		{"if-match fails", req("GET", p, "If-Match: \"a\"\r\n"), false},
		{"if-none-match hit", req("GET", p, "If-None-Match: "+etag+"\r\n"), false},
		{"if-none-match star", req("GET", p, "If-None-Match: *\r\n"), false},
		{"unknown image", req("GET", unknown), false},
		{"malformed path", req("GET", "/cache/xyz"), false},
		{"upper-case hex", req("GET", strings.ToUpper(p)), false},
		{"escaped path", req("GET", strings.Replace(p, "a", "%61", 1)), false},
		{"query", req("GET", p+"?x=1"), false},
		{"post", req("POST", p, "Content-Length: 0\r\n"), false},
		{"get with body", req("GET", p, "Content-Length: 3\r\n") + "abc", false},
		{"two range lines", req("GET", p, "Range: bytes=0-1\r\n", "Range: bytes=2-3\r\n"), false},
		{"two if-range lines", req("GET", p, "Range: bytes=0-9\r\n", "If-Range: "+etag+"\r\n", "If-Range: "+etag+"\r\n"), false},
		{"upgrade", req("GET", p, "Connection: upgrade\r\n", "Upgrade: websocket\r\n"), false},
		{"expect", req("GET", p, "Expect: 100-continue\r\n"), false},
		{"http/1.0", "GET " + p + " HTTP/1.0\r\n\r\n", false},
		{"no host", "GET " + p + " HTTP/1.1\r\n\r\n", false},
		{"invalid host", "GET " + p + " HTTP/1.1\r\nHost: a b\r\n\r\n", false},
		{"ipv6 host", "GET " + p + " HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", true},
		{"obs-text in a header", req("GET", p, "X-A: caf\xe9\r\n"), true},
		{"two hosts", "GET " + p + " HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
		{"bare lf", "GET " + p + " HTTP/1.1\nHost: a\n\n", false},
		{"space before colon", req("GET", p, "Range : bytes=0-1\r\n"), false},
		{"folded line", req("GET", p, "X-A: 1\r\n 2\r\n"), false},
		{"huge head", req("GET", p, "X-Pad: "+strings.Repeat("p", 2*4096)+"\r\n", "Range: bytes=0-9\r\n"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metrictest.Counter(t, c.m.serve.FastResponses)
			want := compared(exchange(t, plain, tc.raw))
			got := compared(exchange(t, fast, tc.raw))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fast path answer differs from net/http (-net/http +fast):\n%s", diff)
			}
			after := metrictest.Counter(t, c.m.serve.FastResponses)
			if served := after > before; served != tc.fast {
				t.Errorf("answered on the fast path: %t, want %t", served, tc.fast)
			}
		})
	}
}

// One keep-alive connection moves from the fast path to net/http at its
// first request for another path, with pipelined requests in flight, and
// every answer arrives in order.
func TestFastPathHandsOverMidConnection(t *testing.T) {
	data := testBytes(8, 5000)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	_, addr := fastServer(t, c, ListenerConfig{})
	conn := dial(t, addr)
	rng := func(a, b int) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nRange: bytes=%d-%d\r\n\r\n", URLPath(d), a, b)
	}
	other := "GET /other HTTP/1.1\r\nHost: x\r\n\r\n"
	reqs := []string{rng(0, 99), rng(100, 199), other, rng(200, 299), rng(4000, 4999)}
	// Pipelined: every request in one write.
	if _, err := io.WriteString(conn, strings.Join(reqs, "")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	wantBody := [][]byte{data[0:100], data[100:200], []byte("other\n"), data[200:300], data[4000:5000]}
	for i, raw := range reqs {
		resp, body := readResponse(t, br, raw)
		if !bytes.Equal(body, wantBody[i]) {
			t.Errorf("request %d: body %q..., want %q...", i, body[:min(len(body), 16)], wantBody[i][:16])
		}
		if i != 2 && resp.StatusCode != http.StatusPartialContent {
			t.Errorf("request %d: status %d", i, resp.StatusCode)
		}
	}
	served, handed := metrictest.Counter(t, c.m.serve.FastResponses), metrictest.Counter(t, c.m.serve.FastHandoffs)
	if served != 2 || handed != 1 {
		t.Errorf("fast path served %v and handed over %v connections, want 2 and 1", served, handed)
	}
}

// Connection: close ends the connection after the answer; a client that
// stops mid-head is dropped after ReadHeaderTimeout; an idle one after
// IdleTimeout.
func TestFastPathConnectionLifetimes(t *testing.T) {
	data := testBytes(9, 3000)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	_, addr := fastServer(t, c, ListenerConfig{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})
	open := func() (net.Conn, *bufio.Reader) {
		conn := dial(t, addr)
		return conn, bufio.NewReader(conn)
	}
	closedWithin := func(name string, br *bufio.Reader, lo, hi time.Duration, start time.Time) {
		t.Helper()
		n, err := br.Read(make([]byte, 1))
		if took := time.Since(start); n != 0 || err != io.EOF || took < lo || took > hi {
			t.Errorf("%s: read %d, %v after %v; want EOF between %v and %v", name, n, err, took, lo, hi)
		}
	}

	conn, br := open()
	raw := "GET " + URLPath(d) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	io.WriteString(conn, raw)
	if resp, body := readResponse(t, br, raw); !resp.Close || !bytes.Equal(body, data) {
		t.Errorf("Connection: close: resp.Close %t, body %d bytes", resp.Close, len(body))
	}
	closedWithin("after Connection: close", br, 0, time.Second, time.Now())

	conn, br = open()
	start := time.Now()
	io.WriteString(conn, "GET "+URLPath(d)+" HTTP/1.1\r\nHo")
	closedWithin("stalled head", br, 250*time.Millisecond, 3*time.Second, start)

	conn, br = open()
	raw = "GET " + URLPath(d) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	io.WriteString(conn, raw)
	readResponse(t, br, raw)
	closedWithin("idle keep-alive", br, 500*time.Millisecond, 3*time.Second, time.Now())
}

// Shutdown closes idle fast connections at once and lets one that is
// sending finish its response.
func TestFastPathShutdown(t *testing.T) {
	data := testBytes(10, 32<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := c.Listener(ln, ListenerConfig{})
	srv := &http.Server{Handler: c.Handler()}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(fl) }()

	idle := dial(t, ln.Addr().String())
	raw := "GET " + URLPath(d) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	io.WriteString(idle, raw)
	ibr := bufio.NewReader(idle)
	readResponse(t, ibr, raw)

	busy := dial(t, ln.Addr().String())
	io.WriteString(busy, raw)
	bbr := bufio.NewReaderSize(busy, 4096)
	if _, err := bbr.Peek(100); err != nil { // the response has started
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	go func() { shut <- fl.Shutdown(ctx) }()
	idle.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := ibr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("idle connection after Shutdown: read %d, %v; want EOF", n, err)
	}
	busy.SetDeadline(time.Now().Add(10 * time.Second))
	if resp, body := readResponse(t, bbr, raw); !bytes.Equal(body, data) {
		t.Errorf("response in flight at Shutdown: %s, %d bytes, want all %d", resp.Status, len(body), len(data))
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
}

// An image evicted while a fast response is being sent stays on disk until
// the response is done, then goes; later requests are handed to net/http,
// which answers 404.
func TestFastPathReaderHoldsEviction(t *testing.T) {
	data := testBytes(11, 32<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	_, addr := fastServer(t, c, ListenerConfig{})
	conn := dial(t, addr)
	raw := "GET " + URLPath(d) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	io.WriteString(conn, raw)
	br := bufio.NewReaderSize(conn, 4096)
	if _, err := br.Peek(100); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(d); err != nil {
		t.Fatal(err)
	}
	if info := c.Images()[0]; info.State != StateEvicting || info.Readers != 1 {
		t.Errorf("during the read: state %v with %d readers, want evicting with 1", info.State, info.Readers)
	}
	if _, body := readResponse(t, br, raw); !bytes.Equal(body, data) {
		t.Errorf("body %d bytes, want %d", len(body), len(data))
	}
	deadline := time.Now().Add(5 * time.Second)
	for fileExists(c.blobPath(d)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if fileExists(c.blobPath(d)) {
		t.Error("blob still on disk after its last reader finished")
	}
	io.WriteString(conn, raw)
	if resp, _ := readResponse(t, br, raw); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after eviction: %s, want 404", resp.Status)
	}
	if served, handed := metrictest.Counter(t, c.m.serve.FastResponses), metrictest.Counter(t, c.m.serve.FastHandoffs); served != 1 || handed != 1 {
		t.Errorf("served %v, handed %v; want 1 and 1", served, handed)
	}
}

// The first request head of a connection has ReadHeaderTimeout from the
// accept on the fast path as on net/http: a client that sends its first
// byte late and then trickles is dropped ReadHeaderTimeout after it
// connected, not that long after its first byte; and a head too large for
// the fast path, handed to net/http, gets no second ReadHeaderTimeout.
func TestFirstHeadDeadlineCountsFromAccept(t *testing.T) {
	const timeout = 800 * time.Millisecond
	c := readyCache(t, testConfig(t), testBytes(12, 100))
	_, fast := fastServer(t, c, ListenerConfig{ReadHeaderTimeout: timeout, IdleTimeout: 10 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plainSrv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: timeout}
	go plainSrv.Serve(ln)
	t.Cleanup(func() { plainSrv.Close() })
	head := "GET " + URLPath(digestOf(testBytes(12, 100))) + " HTTP/1.1\r\nHost: x\r\n"
	for _, tc := range []struct {
		name  string
		first string // sent at timeout/2, then a header line every 50 ms
	}{
		{"late first byte", head},
		{"large head handed over", head + "X-Pad: " + strings.Repeat("p", 6000) + "\r\n"},
	} {
		for server, addr := range map[string]string{"fast path": fast, "net/http": ln.Addr().String()} {
			t.Run(tc.name+" via "+server, func(t *testing.T) {
				conn := dial(t, addr)
				start := time.Now()
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					time.Sleep(timeout / 2)
					if _, err := io.WriteString(conn, tc.first); err != nil {
						return
					}
					for {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
						if _, err := io.WriteString(conn, "X-Trickle: 1\r\n"); err != nil {
							return
						}
					}
				}()
				n, err := io.Copy(io.Discard, conn)
				took := time.Since(start)
				if took < timeout*9/10 || took > timeout*13/10 {
					t.Errorf("connection ended after %v (%d bytes read, %v); want about %v after the connect", took, n, err, timeout)
				}
			})
		}
	}
}
