package httpproxy

import (
	"bytes"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestTLSVerification: a pin replaces chain and name verification; without
// one the chain must reach RootCAs and the certificate must name the host
// (for an IP literal, as an IP SAN). A failed handshake sends no request.
func TestTLSVerification(t *testing.T) {
	f := newFixture(t)
	wrongPin := bytes.Repeat([]byte{0xab}, 32)
	cases := []struct {
		name     string
		url      string
		pin      []byte
		systemCA bool // RootCAs nil: the test CA is unknown
		code     string
	}{
		{name: "pin-ip-literal-unknown-ca", url: "https://127.0.0.1:{P}/", pin: f.spki, systemCA: true},
		{name: "pin-name-not-in-certificate", url: "https://wrongname.test:{P}/", pin: f.spki},
		{name: "pin-mismatch", url: "https://127.0.0.1:{P}/", pin: wrongPin, code: relayerr.PinMismatch},
		{name: "pin-mismatch-even-if-chain-valid", url: "https://allowed.test:{P}/", pin: wrongPin, code: relayerr.PinMismatch},
		{name: "ca-ip-literal-ip-san", url: "https://127.0.0.1:{P}/"},
		{name: "ca-name", url: "https://allowed.test:{P}/"},
		{name: "ca-name-not-in-certificate", url: "https://wrongname.test:{P}/", code: relayerr.TLSFailed},
		{name: "system-roots-unknown-ca", url: "https://127.0.0.1:{P}/", systemCA: true, code: relayerr.TLSFailed},
		{name: "plain-http-listener-under-https", url: "https://127.0.0.5:{P}/", code: relayerr.TLSFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := f.proxy(t, func(cfg *Config) {
				cfg.Registerer = nil
				if c.systemCA {
					cfg.RootCAs = nil
				}
			})
			before := len(f.srv.seen())
			resp, err := do(t, p, &sitev1.HttpProxyRequest{Url: f.u(c.url), TlsSpkiSha256: c.pin})
			requests := len(f.srv.seen()) - before
			if c.code != "" {
				wantCode(t, err, c.code)
				t.Log(err)
				if requests != 0 {
					t.Errorf("target saw %d requests after a failed handshake", requests)
				}
				return
			}
			if err != nil || resp.Status != 200 || requests != 1 {
				t.Fatalf("Do = %v, %v; %d requests", resp, err, requests)
			}
		})
	}
}

// TestRequestRefused: malformed requests are invalid-args (secret refs
// that cannot be read credentials-unavailable), before any packet.
func TestRequestRefused(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	missing := "file://" + f.secretDir + "/missing"
	bad := f.secret(t, "bad", "line1\nline2")
	many := make([]*sitev1.HttpProxyHeader, maxHeaders+1)
	for i := range many {
		many[i] = &sitev1.HttpProxyHeader{Name: "X-N", Value: "v"}
	}
	cases := []struct {
		name string
		req  *sitev1.HttpProxyRequest
		code string
	}{
		{"timeout-over-max", &sitev1.HttpProxyRequest{TimeoutMs: uint32(MaxTimeout.Milliseconds()) + 1}, relayerr.InvalidArgs},
		{"pin-31-bytes", &sitev1.HttpProxyRequest{TlsSpkiSha256: make([]byte, 31)}, relayerr.InvalidArgs},
		{"pin-on-http", &sitev1.HttpProxyRequest{Url: f.u("http://127.0.0.5:{P}/"), TlsSpkiSha256: f.spki}, relayerr.InvalidArgs},
		{"method-options", &sitev1.HttpProxyRequest{Method: "OPTIONS"}, relayerr.InvalidArgs},
		{"method-with-space", &sitev1.HttpProxyRequest{Method: "GET /x HTTP/1.1\r\nHost: 127.0.0.2\r\n"}, relayerr.InvalidArgs},
		{"too-many-headers", &sitev1.HttpProxyRequest{Headers: many}, relayerr.InvalidArgs},
		{"header-value-too-long", &sitev1.HttpProxyRequest{Headers: hdr("X-A", string(make([]byte, maxHeaderValue+1)))}, relayerr.InvalidArgs},
		{"empty-node", &sitev1.HttpProxyRequest{TargetNodeId: "-"}, relayerr.ForbiddenTarget},
		{"secret-ref-outside-dir", &sitev1.HttpProxyRequest{SecretHeaders: hdr("Authorization", "file:///etc/passwd")}, relayerr.CredentialsUnavailable},
		{"secret-ref-not-a-ref", &sitev1.HttpProxyRequest{SecretHeaders: hdr("Authorization", "Bearer abc")}, relayerr.CredentialsUnavailable},
		{"secret-missing", &sitev1.HttpProxyRequest{SecretHeaders: hdr("Authorization", missing)}, relayerr.CredentialsUnavailable},
		{"secret-with-newline-inside", &sitev1.HttpProxyRequest{SecretHeaders: hdr("Authorization", bad)}, relayerr.CredentialsUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.req.Url == "" {
				c.req.Url = f.u("https://127.0.0.1:{P}/")
			}
			_, err := do(t, p, c.req)
			wantCode(t, err, c.code)
			t.Log(err)
		})
	}
	_, err := p.Do(t.Context(), &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/")})
	wantCode(t, err, relayerr.InvalidArgs)
	wantConns(t, f, nil)
}
