package httpproxy

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
	"github.com/siteboot/siteboot/secretref"
)

// FuzzTarget fuzzes the URL parser and allow-list matcher (no network: the
// resolver is the fixture's table). Property: a URL that is accepted
// stands, for net/url too, for exactly the host that was checked, and
// every address it leads to is an IP literal node-a lists, outside Deny,
// unicast, and inside ProvisioningNetworks when plain http. A refusal is
// always a *relayerr.Error.
func FuzzTarget(f *testing.F) {
	for _, c := range hostileCases {
		f.Add(strings.ReplaceAll(c.url, "{P}", "8443"))
	}
	for _, s := range []string{
		"https://127.0.0.1/", "https://allowed.test:8443/a/b?c=d", "HTTPS://ALLOWED.TEST./",
		"https://[::ffff:127.0.0.1]:1/", "http://127.0.0.5/x", "https://mapped.test/", "https://rebind.test/",
		"https://[::ffff:127.0.0.1]/", "https://allowed.test/%2e%2e/", "https://allowed.test/a b",
	} {
		f.Add(s)
	}
	cfg := Config{
		Targets:              testSpec(),
		ProvisioningNetworks: []netip.Prefix{netip.MustParsePrefix(ipProv + "/32")},
		Deny:                 testDeny(),
		Resolver:             newResolver(),
		Secrets:              secretref.Resolver{},
		Logger:               slog.New(slog.DiscardHandler),
	}
	p, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	al, _ := allowListOf(cfg.Targets.Spec(), "node-a")
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := p.checkTarget(t.Context(), "node-a", raw)
		if err != nil {
			var re *relayerr.Error
			if !errors.As(err, &re) {
				t.Fatalf("refusal %v is not a *relayerr.Error", err)
			}
			return
		}
		checkAccepted(t, p, al, raw, tg)
	})
}

func checkAccepted(t *testing.T, p *Proxy, al allowList, raw string, tg *target) {
	if len(tg.ips) == 0 || tg.port == 0 {
		t.Fatalf("%q accepted with no address or port: %+v", raw, tg)
	}
	for _, ip := range tg.ips {
		if !al.ips[ip] || ip.IsUnspecified() || ip.IsMulticast() || inAny(p.cfg.Deny, ip) {
			t.Fatalf("%q accepted with address %s", raw, ip)
		}
		if !tg.https && !inAny(p.cfg.ProvisioningNetworks, ip) {
			t.Fatalf("%q accepted as plain http to %s", raw, ip)
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || (strings.ToLower(u.Scheme) == "https") != tg.https {
		t.Fatalf("%q accepted, but net/url says %v, %v", raw, u, err)
	}
	agree(t, raw, u, tg)
	sent, err := url.Parse(tg.reqURL)
	if err != nil || sent.Host != tg.authority || sent.User != nil {
		t.Fatalf("%q: the URL sent %q has host %q, want %q (%v)", raw, tg.reqURL, sent.Host, tg.authority, err)
	}
	agree(t, tg.reqURL, sent, tg)
	// What net/http will ask the dialer for must be what the dialer
	// accepts.
	port := sent.Port()
	if port == "" {
		port = map[bool]string{true: "443", false: "80"}[tg.https]
	}
	if want := net.JoinHostPort(sent.Hostname(), port); tg.dialAuthority() != want {
		t.Fatalf("%q: the dialer accepts %q, net/http dials %q", raw, tg.dialAuthority(), want)
	}
}

// agree fails unless net/url's reading of u's host and port is the
// target's.
func agree(t *testing.T, raw string, u *url.URL, tg *target) {
	h := u.Hostname()
	if ip, err := netip.ParseAddr(h); err == nil {
		if tg.isName || ip.Unmap() != tg.ips[0] || ip.Zone() != "" {
			t.Fatalf("%q: net/url reads IP %s, the target is %+v", raw, ip, tg)
		}
	} else if n, ok := normalName(h); !ok || n != tg.host || !tg.isName {
		t.Fatalf("%q: net/url reads host %q, the target is %+v", raw, h, tg)
	}
	if port := u.Port(); port != "" && port != strconv.Itoa(int(tg.port)) {
		t.Fatalf("%q: net/url reads port %q, the target has %d", raw, port, tg.port)
	}
}

// TestTargetNormalisation pins down what the matcher makes of accepted
// URLs: the host and authority sent and the address dialled.
func TestTargetNormalisation(t *testing.T) {
	p, err := New(Config{Targets: testSpec(), Secrets: secretref.Resolver{}, Logger: slog.New(slog.DiscardHandler),
		Resolver: newResolver(), Deny: testDeny(), ProvisioningNetworks: []netip.Prefix{netip.MustParsePrefix(ipProv + "/32")}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ raw, reqURL, dial string }{
		{"https://127.0.0.1/", "https://127.0.0.1/", "127.0.0.1:443"},
		{"HTTPS://Allowed.Test.:8443/a%2Fb?q=1", "https://allowed.test:8443/a%2Fb?q=1", "127.0.0.1:8443"},
		{"https://[::ffff:127.0.0.1]:9/", "https://127.0.0.1:9/", "127.0.0.1:9"},
		{"http://127.0.0.5", "http://127.0.0.5", "127.0.0.5:80"},
		{"https://mapped.test/x", "https://mapped.test/x", "127.0.0.1:443"},
	}
	al, _ := allowListOf(p.cfg.Targets.Spec(), "node-a")
	for _, c := range cases {
		tg, err := p.checkTarget(t.Context(), "node-a", c.raw)
		if err != nil {
			t.Errorf("%s: %v", c.raw, err)
			continue
		}
		checkAccepted(t, p, al, c.raw, tg)
		if tg.reqURL != c.reqURL || tg.dialAddr().String() != c.dial {
			t.Errorf("%s: sent %s dialled %s, want %s %s", c.raw, tg.reqURL, tg.dialAddr(), c.reqURL, c.dial)
		}
	}
	spec := &sitev1.SiteSpec{}
	if _, err := allowListOf(spec, "node-a"); relayerr.Code(err) != relayerr.ForbiddenTarget {
		t.Errorf("empty spec: %v", err)
	}
}
