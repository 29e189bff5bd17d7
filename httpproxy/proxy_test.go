package httpproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// wantConns compares the connections every listener saw with want (the
// others must have seen none).
func wantConns(t *testing.T, f *fixture, want map[string]int) {
	t.Helper()
	full := map[string]int{}
	for _, ip := range fixtureIPs {
		full[ip] = want[ip]
	}
	if diff := cmp.Diff(full, f.counts(t)); diff != "" {
		t.Errorf("connections per listener (-want +got):\n%s", diff)
	}
}

func do(t *testing.T, p *Proxy, req *sitev1.HttpProxyRequest) (*sitev1.HttpProxyResponse, error) {
	t.Helper()
	if req.TargetNodeId == "" {
		req.TargetNodeId = "node-a"
	}
	return p.Do(context.Background(), req)
}

// TestAllowedTargets: the forms of an allowed host that are accepted, each
// reaching exactly the listener it names, with the Host header the URL's
// normalised host.
func TestAllowedTargets(t *testing.T) {
	cases := []struct {
		name, url, listener, host string
		lookups                   int
	}{
		{"ip-literal", "https://127.0.0.1:{P}/x", ipAllowed, "127.0.0.1:{P}", 0},
		{"name", "https://allowed.test:{P}/x", ipAllowed, "allowed.test:{P}", 1},
		{"name-upper-case-trailing-dot", "https://ALLOWED.Test.:{P}/x", ipAllowed, "allowed.test:{P}", 1},
		{"v4-mapped-literal", "https://[::ffff:127.0.0.1]:{P}/x", ipAllowed, "127.0.0.1:{P}", 0},
		{"v4-mapped-answer", "https://mapped.test:{P}/x", ipAllowed, "mapped.test:{P}", 1},
		{"scheme-upper-case", "HTTPS://127.0.0.1:{P}/x", ipAllowed, "127.0.0.1:{P}", 0},
		{"http-in-provisioning-network", "http://127.0.0.5:{P}/x", ipProv, "127.0.0.5:{P}", 0},
		{"HTTP-upper-in-provisioning-network", "HTTP://127.0.0.5:{P}/x", ipProv, "127.0.0.5:{P}", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.proxy(t, nil)
			resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u(c.url)})
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.Status != 200 || string(resp.Body) != "hello GET /x" || resp.Truncated {
				t.Errorf("resp = %d %q truncated=%v", resp.Status, resp.Body, resp.Truncated)
			}
			if got := f.res.total(); got != c.lookups {
				t.Errorf("%d lookups, want %d", got, c.lookups)
			}
			seen := f.srv.seen()
			if len(seen) != 1 || seen[0].Host != f.u(c.host) {
				t.Errorf("target saw %+v, want one request with Host %s", seen, f.u(c.host))
			}
			wantConns(t, f, map[string]int{c.listener: 1})
		})
	}
}

// TestDNSChangesBetweenCheckAndDial: rebind.test answers an allowed IP
// first and a stray one after. The request is resolved once and the
// checked IP dialled; a later request sees the new answer and is refused.
func TestDNSChangesBetweenCheckAndDial(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://rebind.test:{P}/")})
	if err != nil || resp.Status != 200 {
		t.Fatalf("Do = %v, %v", resp, err)
	}
	if got := f.res.calls["rebind.test"]; got != 1 {
		t.Errorf("%d lookups of rebind.test, want 1", got)
	}
	wantConns(t, f, map[string]int{ipAllowed: 1})

	_, err = do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://rebind.test:{P}/")})
	wantCode(t, err, relayerr.ForbiddenTarget)
	wantConns(t, f, map[string]int{ipAllowed: 1})
}

// TestRedirectsReturned: a 3xx is the response; nothing follows it, not to
// another host and not to the allowed host itself.
func TestRedirectsReturned(t *testing.T) {
	cases := []struct {
		path     string
		status   uint32
		location string
	}{
		{"/redirect-other", 302, "https://" + ipOther + ":{P}/"},
		{"/redirect-self", 307, "/final"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			f := newFixture(t)
			p := f.proxy(t, nil)
			resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}" + c.path)})
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.Status != c.status || headerValue(resp, "Location") != f.u(c.location) {
				t.Errorf("resp = %d Location %q, want %d %q", resp.Status, headerValue(resp, "Location"), c.status, f.u(c.location))
			}
			var paths []string
			for _, s := range f.srv.seen() {
				paths = append(paths, s.Path)
			}
			if diff := cmp.Diff([]string{c.path}, paths); diff != "" {
				t.Errorf("paths the target saw (-want +got):\n%s", diff)
			}
			wantConns(t, f, map[string]int{ipAllowed: 1})
		})
	}
}

func headerValue(resp *sitev1.HttpProxyResponse, name string) string {
	for _, h := range resp.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// TestResponseCap: a body over the cap is cut at exactly the cap with
// truncated set; a body that never ends stops at the cap long before the
// timeout, and the target sees its connection closed.
func TestResponseCap(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	limit := int(f.config(nil).MaxResponseBytes)
	resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/big")})
	if err != nil {
		t.Fatalf("Do /big: %v", err)
	}
	if !resp.Truncated || string(resp.Body) != strings.Repeat("b", limit) {
		t.Errorf("/big: truncated=%v, %d bytes, want truncated and exactly %d 'b'", resp.Truncated, len(resp.Body), limit)
	}

	start := time.Now()
	resp, err = do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/endless"), TimeoutMs: 20000})
	if err != nil {
		t.Fatalf("Do /endless: %v", err)
	}
	if !resp.Truncated || len(resp.Body) != limit {
		t.Errorf("/endless: truncated=%v, %d bytes, want truncated and %d", resp.Truncated, len(resp.Body), limit)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("/endless took %v: reading did not stop at the cap", took)
	}
	select {
	case n := <-f.srv.endless:
		t.Logf("the endless body stopped after %d bytes written", n)
	case <-time.After(10 * time.Second):
		t.Error("the target is still writing: the connection was not closed at the cap")
	}
	wantConns(t, f, map[string]int{ipAllowed: 2})
}

// TestTimeout: a target that stops sending before the headers or in the
// body is a timeout error, not a response.
func TestTimeout(t *testing.T) {
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t)
			p := f.proxy(t, nil)
			start := time.Now()
			resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}" + path), TimeoutMs: 300})
			if err == nil {
				t.Logf("resp %v after %v", resp, time.Since(start))
			}
			wantCode(t, err, relayerr.Timeout)
			if resp != nil {
				t.Errorf("resp = %v, want none", resp)
			}
			if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
				t.Errorf("took %v, want about 300ms", took)
			}
		})
	}
	t.Run("config-default", func(t *testing.T) {
		f := newFixture(t)
		p := f.proxy(t, func(c *Config) { c.Timeout = 200 * time.Millisecond })
		_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/slow-headers")})
		wantCode(t, err, relayerr.Timeout)
	})
}

// TestDefaultDenyRefusesLoopback: with Deny unset (DefaultDeny), a listed
// loopback address is refused and nothing is dialled.
func TestDefaultDenyRefusesLoopback(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, func(c *Config) { c.Deny = nil })
	for _, u := range []string{"https://127.0.0.1:{P}/", "https://allowed.test:{P}/", "https://[::ffff:127.0.0.1]:{P}/"} {
		_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u(u)})
		wantCode(t, err, relayerr.ForbiddenTarget)
	}
	wantConns(t, f, nil)
}

// TestDenyLocal: with DenyLocal, an address of one of the appliance's
// interfaces (127.0.0.1 on lo) is refused; another loopback address that
// no interface has (127.0.0.5) is not.
func TestDenyLocal(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, func(c *Config) { c.DenyLocal = true })
	_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/")})
	wantCode(t, err, relayerr.ForbiddenTarget)
	resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("http://127.0.0.5:{P}/")})
	if err != nil || resp.Status != 200 {
		t.Fatalf("Do 127.0.0.5 = %v, %v", resp, err)
	}
	wantConns(t, f, map[string]int{ipProv: 1})
}

// TestRequestPassedOn: method, body, headers (plain and secret) reach the
// target; the response's headers come back sorted, every value its own
// entry.
func TestRequestPassedOn(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	ref := f.secret(t, "token", "tok-123\n")
	resp, err := do(t, p, &sitev1.HttpProxyRequest{
		Url: f.u("https://allowed.test:{P}/api?x=1"), Method: "post", Body: []byte(`{"a":1}`),
		Headers:       hdr("X-A", "1", "x-a", "2", "Content-Type", "application/json"),
		SecretHeaders: hdr("Authorization", ref),
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := &sitev1.HttpProxyResponse{Status: 200, Body: []byte("hello POST /api"), Headers: []*sitev1.HttpProxyHeader{
		{Name: "Content-Length", Value: "15"}, {Name: "Content-Type", Value: "text/plain; charset=utf-8"},
		{Name: "Date", Value: headerValue(resp, "Date")},
		{Name: "Set-Cookie", Value: "a=1"}, {Name: "Set-Cookie", Value: "b=2"}, {Name: "X-Target", Value: "ok"},
	}}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	seen := f.srv.seen()
	if len(seen) != 1 {
		t.Fatalf("target saw %d requests", len(seen))
	}
	s := seen[0]
	got := map[string]any{"method": s.Method, "body": s.Body, "x-a": s.Header.Values("X-A"),
		"auth": s.Header.Get("Authorization"), "ua": s.Header.Get("User-Agent"), "conn": s.Header.Get("Connection")}
	wantSeen := map[string]any{"method": "POST", "body": `{"a":1}`, "x-a": []string{"1", "2"},
		"auth": "tok-123", "ua": userAgent, "conn": "close"}
	if diff := cmp.Diff(wantSeen, got); diff != "" {
		t.Errorf("what the target saw (-want +got):\n%s", diff)
	}
}
