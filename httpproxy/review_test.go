package httpproxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestSwitchingProtocolsBounded: a target that answers 101 Switching
// Protocols (net/http then hands over the raw connection, outside the
// request's context) and goes silent is refused at once (the proxy asked
// for no upgrade) instead of holding the request and its busy slot for as
// long as the target likes.
func TestSwitchingProtocolsBounded(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:{P}/upgrade-silent", "http://127.0.0.5:{P}/upgrade-silent"} {
		t.Run(u, func(t *testing.T) {
			f := newFixture(t)
			p := f.proxy(t, func(c *Config) { c.MaxRequests = 1 })
			type result struct {
				resp *sitev1.HttpProxyResponse
				err  error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				resp, err := p.Do(t.Context(), &sitev1.HttpProxyRequest{TargetNodeId: "node-a", Url: f.u(u), TimeoutMs: 300})
				done <- result{resp, err}
			}()
			select {
			case r := <-done:
				if r.err == nil {
					t.Fatalf("Do = %v, want an error", r.resp)
				}
				wantCode(t, r.err, relayerr.Unreachable)
				if took := time.Since(start); took > 3*time.Second {
					t.Errorf("took %v, want about 300ms", took)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Do still running 3s after a 300ms timeout: the 101 connection is read without a deadline")
			}
			if len(p.sem) != 0 {
				t.Errorf("%d busy slots held after Do returned", len(p.sem))
			}
		})
	}
}

// TestDefaultDenyCloudMetadata: the metadata services that are not in
// 169.254.0.0/16 are refused by DefaultDeny too (checked without a packet:
// the addresses would leave the machine).
func TestDefaultDenyCloudMetadata(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, func(c *Config) { c.Deny = nil })
	for _, s := range []string{"169.254.169.254", "fd00:ec2::254", "100.100.100.200"} {
		err := p.checkIPs([]netip.Addr{netip.MustParseAddr(s)}, true)
		if err == nil {
			t.Errorf("checkIPs(%s) passed, want forbidden-target", s)
			continue
		}
		wantCode(t, err, relayerr.ForbiddenTarget)
	}
}

// TestLongHeaderNameBounded: a header name of the caller's choosing (a
// valid token of any length), or a great many headers, do not make an
// error or the log line longer than a few hundred bytes.
func TestLongHeaderNameBounded(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	var many []*sitev1.HttpProxyHeader
	for range 20000 {
		many = append(many, &sitev1.HttpProxyHeader{Name: "X-Many-Name", Value: "v"})
	}
	for _, c := range []struct {
		name            string
		headers, secret []*sitev1.HttpProxyHeader
	}{
		{"control-byte-value", hdr("X-"+long, "a\x01b"), nil},
		{"refused-proxy-name", hdr("Proxy-"+long, "v"), nil},
		{"secret-ref-refused", nil, hdr("X-"+long, "nope://ref")},
		{"many-headers", many, nil},
		{"many-secret-headers", nil, many},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.proxy(t, nil)
			_, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/"), Headers: c.headers, SecretHeaders: c.secret})
			if err == nil {
				t.Fatal("Do passed, want an error")
			}
			if n := len(err.Error()); n > 512 {
				t.Errorf("error is %d bytes long", n)
			}
			if n := len(f.logs.String()); n > 2048 {
				t.Errorf("log is %d bytes long", n)
			}
			wantConns(t, f, nil)
		})
	}
}

// TestSecretEchoWithheld: a target that reflects the request's headers
// (an echo endpoint, an error page) would hand a secret header's value to
// the caller, who named only its ref. Such a response is withheld; plain
// headers echoed back are the caller's own and pass.
func TestSecretEchoWithheld(t *testing.T) {
	const value = "sEcReT-echo-value-3b9d"
	// The echoed body is the request's headers, X-Auth-Token last: a cap
	// that cuts it inside the value.
	prefix := "Connection: close\r\nUser-Agent: siteboot-httpproxy\r\nX-Auth-Token: "
	for _, c := range []struct {
		path string
		cap  int64
	}{{"/echo-body", 0}, {"/echo-header", 0}, {"/echo-body", int64(len(prefix) + len(value) - 1)}} {
		t.Run(fmt.Sprintf("%s-cap-%d", c.path, c.cap), func(t *testing.T) {
			path := c.path
			f := newFixture(t)
			p := f.proxy(t, func(cfg *Config) {
				if c.cap > 0 {
					cfg.MaxResponseBytes = c.cap
				}
			})
			ref := f.secret(t, "token", value+"\n")
			u := f.u("https://127.0.0.1:{P}" + path)
			resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: u, SecretHeaders: hdr("X-Auth-Token", ref)})
			if err == nil {
				if strings.Contains(respText(resp), value) {
					t.Fatal("the secret came back in the response")
				}
				t.Fatalf("Do = %v, want an error", resp)
			}
			wantCode(t, err, relayerr.Internal)
			if strings.Contains(err.Error(), value) || strings.Contains(f.logs.String(), value) {
				t.Errorf("the secret is in the error or the log: %v", err)
			}
			resp, err = do(t, p, &sitev1.HttpProxyRequest{Url: u, Headers: hdr("X-Plain", value)})
			if err != nil {
				t.Fatalf("plain header echoed: Do = %v", err)
			}
			if !strings.Contains(respText(resp), value[:len(value)-1]) {
				t.Errorf("the plain header did not come back: %s", respText(resp))
			}
		})
	}
}

// respText is the response's header values and body as text.
func respText(resp *sitev1.HttpProxyResponse) string {
	var b strings.Builder
	for _, h := range resp.GetHeaders() {
		b.WriteString(h.GetName() + ": " + h.GetValue() + "\n")
	}
	b.Write(resp.GetBody())
	return b.String()
}
