package bmc

import (
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// hostileBMC is a Redfish BMC that misbehaves: it stands in front of a
// real redfishsim and may delay every answer or answer some paths itself.
type hostileBMC struct {
	srv    *httptest.Server
	reqs   atomic.Int64
	served atomic.Int64 // bytes written by override
}

// startHostile serves on 127.0.0.1:0 over TLS. delay is added before every
// answer; override, when it returns true, has answered the request itself.
func startHostile(t *testing.T, delay time.Duration, override func(w http.ResponseWriter, r *http.Request, h *hostileBMC) bool) *hostileBMC {
	t.Helper()
	inner := startRedfish(t, true)
	u, _ := url.Parse("https://" + inner.Addr().String())
	proxy := httputil.NewSingleHostReverseProxy(u)
	tp := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	proxy.Transport = tp
	h := &hostileBMC{}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.reqs.Add(1)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		if override != nil && override(w, r, h) {
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.srv.Listener.Close()
	h.srv.Listener = ln
	h.srv.StartTLS()
	t.Cleanup(func() { h.srv.CloseClientConnections(); h.srv.Close(); tp.CloseIdleConnections() })
	return h
}

func (h *hostileBMC) req(op string) *sitev1.BmcOperationRequest {
	return &sitev1.BmcOperationRequest{Driver: "redfish", Address: "https://" + h.srv.Listener.Addr().String(),
		CredentialsRef: "env://RF", Operation: op}
}

// A BMC that answers each request within the time left at the start but
// lists many systems, each answered slowly, must not stretch one operation
// past Config.Timeout: gofish sends its requests without the operation's
// context, each bounded only by the time left when the session opened.
func TestSlowBMCIsBoundedByDeadline(t *testing.T) {
	h := startHostile(t, 0, func(w http.ResponseWriter, r *http.Request, h *hostileBMC) bool {
		const coll = "/redfish/v1/Systems"
		switch p := r.URL.Path; {
		case p == coll:
			var m []string
			for i := range 20 {
				m = append(m, fmt.Sprintf(`{"@odata.id":"%s/slow%d"}`, coll, i))
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"@odata.id":%q,"Members":[%s]}`, coll, strings.Join(m, ","))
		case strings.HasPrefix(p, coll+"/slow"):
			select {
			case <-time.After(500 * time.Millisecond):
			case <-r.Context().Done():
				return true
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"@odata.id":%q,"Id":"slow","PowerState":"On"}`, p)
		default:
			return false
		}
		return true
	})
	tr := newTestRelay(t, func(c *Config) { c.Timeout = 2 * time.Second })
	start := time.Now()
	res := tr.do(t, h.req("power.getPower"))
	d := time.Since(start)
	if d > 3500*time.Millisecond {
		t.Fatalf("a 2s deadline took %s (%d requests reached the BMC)", d, h.reqs.Load())
	}
	wantCode(t, res, relayerr.Timeout, "deadline")
}

// endlessSystems answers the Systems collection with pages that link on
// for ever; each page has one member with a Description of pad, or none
// when pad is empty.
func endlessSystems(pad string) func(http.ResponseWriter, *http.Request, *hostileBMC) bool {
	const coll = "/redfish/v1/Systems"
	page := func(n int) string {
		m := ""
		if pad != "" {
			m = fmt.Sprintf(`{"@odata.id":"%s/big%d"}`, coll, n)
		}
		return fmt.Sprintf(`{"@odata.id":%q,"Members":[%s],"Members@odata.nextLink":"%s/page%d"}`, coll, m, coll, n+1)
	}
	return func(w http.ResponseWriter, r *http.Request, h *hostileBMC) bool {
		var body string
		switch p := r.URL.Path; {
		case p == coll:
			body = page(0)
		case strings.HasPrefix(p, coll+"/page"):
			n, _ := strconv.Atoi(strings.TrimPrefix(p, coll+"/page"))
			body = page(n)
		case strings.HasPrefix(p, coll+"/big"):
			body = fmt.Sprintf(`{"@odata.id":%q,"Id":"big","PowerState":"On","Description":%q}`, p, pad)
		default:
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		n, _ := w.Write([]byte(body))
		h.served.Add(int64(n))
		return true
	}
}

// A BMC whose Systems collection pages on for ever, each member big, must
// not make one operation read without end (gofish keeps every member it
// read): the bytes of one operation are bounded, not only those of one
// response.
func TestEndlessCollectionIsBoundedInBytes(t *testing.T) {
	h := startHostile(t, 0, endlessSystems(strings.Repeat("x", 256<<10)))
	tr := newTestRelay(t, func(c *Config) { c.Timeout = 30 * time.Second })
	tr.limits.bytes = 4 << 20
	start := time.Now()
	res := tr.do(t, h.req("power.getPower"))
	limit := tr.limits.bytes + maxResponseBytes
	if n := h.served.Load(); n > limit {
		t.Fatalf("one operation read %d bytes (%d requests, %s), want at most %d", n, h.reqs.Load(), time.Since(start), limit)
	}
	wantCode(t, res, relayerr.BMCError, "larger than")
}

// Small pages linking on for ever: the requests of one operation are
// bounded (gofish follows nextLink recursively).
func TestEndlessCollectionIsBoundedInRequests(t *testing.T) {
	h := startHostile(t, 0, endlessSystems(""))
	tr := newTestRelay(t, func(c *Config) { c.Timeout = 30 * time.Second })
	tr.limits.requests = 100
	start := time.Now()
	res := tr.do(t, h.req("power.getPower"))
	if n := h.reqs.Load(); n > tr.limits.requests {
		t.Fatalf("one operation sent %d requests (%s), want at most %d", n, time.Since(start), tr.limits.requests)
	}
	wantCode(t, res, relayerr.BMCError, "responses in all")
}

// With DEBUG_BMCLIB=true in the process environment, bmclib has gofish dump
// every request, the session login with the password included, to
// os.Stdout. The relay refuses to run redfish then.
func TestDebugBMCLIBIsRefused(t *testing.T) {
	rf := startRedfish(t, true)
	tr := newTestRelay(t, nil)
	t.Setenv("DEBUG_BMCLIB", "true")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = pw
	done := make(chan string)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				done <- b.String()
				return
			}
		}
	}()
	res := tr.Do(t.Context(), rfReq(rf, "env://RF", "power.getPower", ""))
	os.Stdout = stdout
	pw.Close()
	out := <-done
	pr.Close()
	if strings.Contains(out, rfPassword) {
		t.Errorf("the password went to stdout:\n%.300s", out)
	}
	wantCode(t, res, relayerr.Internal, "DEBUG_BMCLIB")
	if n := rf.Requests(); n != 0 {
		t.Errorf("the BMC got %d requests", n)
	}
}

// A BMC cannot send the relay to another host: not by a redirect, not by
// member links that gofish glues to the endpoint ("@host:port/…" makes
// the endpoint userinfo, an absolute URL makes nonsense). A listener on
// 127.0.0.2, outside bmc.networks, counts what arrives: nothing may.
func TestBMCCannotRedirectTheRelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	other := ln.Addr().String()
	const coll = "/redfish/v1/Systems"
	members := func(link string) func(http.ResponseWriter, *http.Request, *hostileBMC) bool {
		return func(w http.ResponseWriter, r *http.Request, _ *hostileBMC) bool {
			if r.URL.Path != coll {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"@odata.id":%q,"Members":[{"@odata.id":%q}]}`, coll, link)
			return true
		}
	}
	cases := []struct {
		name     string
		override func(http.ResponseWriter, *http.Request, *hostileBMC) bool
	}{
		{"redirect", func(w http.ResponseWriter, r *http.Request, _ *hostileBMC) bool {
			if r.URL.Path != coll {
				return false
			}
			http.Redirect(w, r, "https://"+other+coll, http.StatusFound)
			return true
		}},
		{"userinfo link", members("@" + other + coll + "/1")},
		{"absolute link", members("https://" + other + coll + "/1")},
		{"scheme-relative link", members("//" + other + coll + "/1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startHostile(t, 0, tc.override)
			tr := newTestRelay(t, nil)
			if res := tr.do(t, h.req("power.getPower")); res.GetOk() {
				t.Errorf("result ok: %v", res)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections reached %s, outside bmc.networks", n, other)
	}
}

// gofish v0.19.0 writes one map from two goroutines when a collection
// member and then the next page fail (GetCollectionObjects), a data race
// and, when the writes meet, a fatal error that ends the process. A
// hostile BMC answering both with 500 must not get there: the second
// failure of an operation is answered by the relay. Run with -race.
func TestFailingMemberAndPageDoNotRaceInGofish(t *testing.T) {
	const coll = "/redfish/v1/Systems"
	h := startHostile(t, 0, func(w http.ResponseWriter, r *http.Request, _ *hostileBMC) bool {
		switch r.URL.Path {
		case coll:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"@odata.id":%q,"Members":[{"@odata.id":"%s/bad"}],"Members@odata.nextLink":"%s/page1"}`, coll, coll, coll)
		case coll + "/bad", coll + "/page1":
			http.Error(w, "no", http.StatusInternalServerError)
		default:
			return false
		}
		return true
	})
	tr := newTestRelay(t, nil)
	for range 3 {
		wantCode(t, tr.do(t, h.req("power.getPower")), relayerr.BMCError, "HTTP 500")
	}
}

// The log line names the address and the credentials_ref a request gave;
// a caller that puts a password into either (https://admin:pw@bmc, the
// JSON itself as the ref) is refused, and the password must not be logged
// either: only values that passed their checks are.
func TestRefusedFieldsAreNotLogged(t *testing.T) {
	const secret = "Pasted-S3cret-99"
	tr := newTestRelay(t, nil)
	for _, req := range []*sitev1.BmcOperationRequest{
		{Driver: "redfish", Address: "https://admin:" + secret + "@127.0.0.1", CredentialsRef: "env://RF", Operation: "power.getPower"},
		{Driver: "ipmi", Address: "admin:" + secret + "@127.0.0.1", CredentialsRef: "env://IPMI", Operation: "power.getPower"},
		{Driver: "redfish", Address: "127.0.0.1", CredentialsRef: `{"username":"u","password":"` + secret + `"}`, Operation: "power.getPower"},
	} {
		if res := tr.do(t, req); res.GetOk() || strings.Contains(res.String(), secret) {
			t.Errorf("result %v", res)
		}
	}
	if log := tr.log.String(); strings.Contains(log, secret) {
		t.Fatalf("the password is in the log:\n%s", log)
	}
}

// A gzip bomb: a small compressed body that inflates to 8 MiB, twice the per-response cap. net/http
// inflates it below gofish; the caps count the inflated bytes.
func TestGzipBombIsCapped(t *testing.T) {
	var zb strings.Builder
	zw := gzip.NewWriter(&zb)
	fmt.Fprintf(zw, `{"@odata.id":"/redfish/v1/Systems/bomb","Id":"bomb","PowerState":"On","Description":"`)
	chunk := strings.Repeat("x", 1<<20)
	for range 8 {
		zw.Write([]byte(chunk))
	}
	fmt.Fprint(zw, `"}`)
	zw.Close()
	bomb := zb.String()
	const coll = "/redfish/v1/Systems"
	h := startHostile(t, 0, func(w http.ResponseWriter, r *http.Request, h *hostileBMC) bool {
		switch r.URL.Path {
		case coll:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"@odata.id":%q,"Members":[{"@odata.id":"%s/bomb"}]}`, coll, coll)
		case coll + "/bomb":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			n, _ := io.WriteString(w, bomb)
			h.served.Add(int64(n))
		default:
			return false
		}
		return true
	})
	tr := newTestRelay(t, nil)
	wantCode(t, tr.do(t, h.req("power.getPower")), relayerr.BMCError, "larger than")
}
