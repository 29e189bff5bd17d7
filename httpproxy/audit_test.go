package httpproxy

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestSecretAudit runs requests that succeed and requests that fail at
// every stage with known secrets in a secret header, a plain Authorization
// header, another plain header, the URL's user info and its query. None of
// them may appear in the log (debug level), an error, a response or the
// metrics; the secret header and Authorization do reach the target.
func TestSecretAudit(t *testing.T) {
	const (
		fileSecret = "sEcReT-file-value-7f3a"
		badSecret  = "sEcReT-bad-value-5c6d"
		plainAuth  = "Bearer pLaIn-authz-9c1e"
		plainOther = "cUsToM-value-1a2b"
		urlUser    = "uSeRiNfO-pass-4d2b"
		urlQuery   = "qUeRy-token-8e5f"
	)
	secrets := []string{fileSecret, badSecret, plainAuth, "pLaIn-authz-9c1e", plainOther, urlUser, urlQuery}
	f := newFixture(t)
	p := f.proxy(t, nil)
	good := f.secret(t, "token", fileSecret+"\n")
	bad := f.secret(t, "bad", badSecret+"\r\ninjected: 1")
	plain := hdr("Authorization", plainAuth, "X-Custom", plainOther)
	withSecret := hdr("X-Auth-Token", good)
	cases := []struct {
		name   string
		req    *sitev1.HttpProxyRequest
		code   string
		mod    func(*Config)
		status uint32
	}{
		{name: "ok", req: &sitev1.HttpProxyRequest{Url: f.u("https://allowed.test:{P}/x?token=" + urlQuery)}, status: 200},
		{name: "redirect", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/redirect-other?token=" + urlQuery)}, status: 302},
		{name: "forbidden", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.3:{P}/?token=" + urlQuery)}, code: relayerr.ForbiddenTarget},
		{name: "userinfo", req: &sitev1.HttpProxyRequest{Url: f.u("https://admin:" + urlUser + "@127.0.0.1:{P}/?token=" + urlQuery)}, code: relayerr.ForbiddenTarget},
		{name: "userinfo-unparsable", req: &sitev1.HttpProxyRequest{Url: f.u("https://admin:" + urlUser + "@127.0.0.1:{P}/%zz")}, code: relayerr.ForbiddenTarget},
		{name: "invalid-header", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/"), Headers: hdr("Upgrade", plainOther)}, code: relayerr.InvalidArgs},
		{name: "crlf-header", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/"), Headers: hdr("X-A", plainOther+"\r\n")}, code: relayerr.InvalidArgs},
		{name: "bad-secret", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/"), SecretHeaders: hdr("X-Bad", bad)}, code: relayerr.CredentialsUnavailable},
		{name: "pin-mismatch", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/"), TlsSpkiSha256: make([]byte, 32)}, code: relayerr.PinMismatch},
		{name: "tls-failed", req: &sitev1.HttpProxyRequest{Url: f.u("https://wrongname.test:{P}/")}, code: relayerr.TLSFailed},
		{name: "timeout", req: &sitev1.HttpProxyRequest{Url: f.u("https://127.0.0.1:{P}/slow-headers"), TimeoutMs: 200}, code: relayerr.Timeout},
	}
	var out bytes.Buffer
	for _, c := range cases {
		c.req.TargetNodeId = "node-a"
		c.req.Headers = append(c.req.Headers, plain...)
		if c.req.SecretHeaders == nil {
			c.req.SecretHeaders = withSecret
		}
		resp, err := p.Do(t.Context(), c.req)
		if c.code != "" {
			wantCode(t, err, c.code)
			out.WriteString(err.Error() + "\n")
			continue
		}
		if err != nil || resp.Status != c.status {
			t.Fatalf("%s: Do = %v, %v", c.name, resp, err)
		}
		b, _ := protojson.Marshal(resp)
		out.Write(b)
	}
	// The ok and redirect requests reached the target before Do returned;
	// the timed-out one may reach it, or not, by the time Do gave up.
	var seen []seenRequest
	for _, r := range f.srv.seen() {
		if r.Path != "/slow-headers" {
			seen = append(seen, r)
		}
	}
	if len(seen) != 2 || seen[0].Header.Get("X-Auth-Token") != fileSecret || seen[0].Header.Get("Authorization") != plainAuth {
		t.Errorf("the target did not get the secret and Authorization headers: %+v", seen)
	}
	logs, metrics := f.logs.String(), metricText(t, f.reg)
	if got := strings.Count(logs, "\n"); got != len(cases) {
		t.Errorf("%d log lines for %d requests", got, len(cases))
	}
	for _, s := range secrets {
		for where, text := range map[string]string{"log": logs, "errors and responses": out.String(), "metrics": metrics} {
			if strings.Contains(text, s) {
				t.Errorf("secret %q in the %s:\n%s", s, where, text)
			}
		}
	}
	if !strings.Contains(logs, `"secret_headers":["X-Auth-Token"]`) || !strings.Contains(logs, `"Authorization"`) {
		t.Errorf("the log does not name the headers:\n%s", logs)
	}
}
