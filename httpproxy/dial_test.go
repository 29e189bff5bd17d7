package httpproxy

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestDialerRefusesUncheckedAddress: the dialer behind every request is
// the last check. It dials only the checked IP for the URL's host:port,
// once; anything else, or a checked IP that has become denied, is refused
// without a connection.
func TestDialerRefusesUncheckedAddress(t *testing.T) {
	f := newFixture(t)
	p := f.proxy(t, nil)
	tg, err := p.checkTarget(t.Context(), "node-a", f.u("https://allowed.test:{P}/"))
	if err != nil {
		t.Fatal(err)
	}
	d := &dialer{p: p, t: tg}
	for _, addr := range []string{f.u(ipStray + ":{P}"), f.u(ipAllowed + ":{P}"), "allowed.test:1"} {
		if c, err := (&dialer{p: p, t: tg}).dial(t.Context(), "tcp", addr); !errors.Is(err, errUnexpectedDial) {
			t.Errorf("dial %s = %v, %v; want errUnexpectedDial", addr, c, err)
		}
	}
	if _, err := (&dialer{p: p, t: tg}).dial(t.Context(), "udp", tg.dialAuthority()); !errors.Is(err, errUnexpectedDial) {
		t.Errorf("udp dial: %v, want errUnexpectedDial", err)
	}
	c, err := d.dial(t.Context(), "tcp", tg.dialAuthority())
	if err != nil {
		t.Fatalf("dial of the checked address: %v", err)
	}
	c.Close()
	if _, err := d.dial(t.Context(), "tcp", tg.dialAuthority()); !errors.Is(err, errUnexpectedDial) {
		t.Errorf("second dial: %v, want errUnexpectedDial", err)
	}
	p.cfg.Deny = append(p.cfg.Deny, netip.MustParsePrefix(ipAllowed+"/32"))
	_, err = (&dialer{p: p, t: tg}).dial(t.Context(), "tcp", tg.dialAuthority())
	wantCode(t, err, relayerr.ForbiddenTarget)
	wantConns(t, f, map[string]int{ipAllowed: 1})
}
