package ipv4host

import (
	"net/netip"
	"testing"
)

func TestIs(t *testing.T) {
	p24 := netip.MustParsePrefix("10.1.2.0/24")
	for _, c := range []struct {
		addr string
		net  netip.Prefix
		want bool
	}{
		{"10.1.2.7", p24, true},
		{"10.1.2.0", p24, false},   // the network address
		{"10.1.2.255", p24, false}, // the directed broadcast
		{"10.1.3.255", p24, true},  // another network's: nothing says
		{"10.1.2.255", netip.Prefix{}, true},
		{"255.255.255.255", netip.Prefix{}, false},
		{"0.0.0.0", netip.Prefix{}, false},
		{"224.0.0.1", netip.Prefix{}, false},
		{"239.255.255.250", p24, false},
		{"127.0.0.1", netip.Prefix{}, true},
		{"10.1.2.1", netip.MustParsePrefix("10.1.2.0/31"), true}, // RFC 3021
		{"10.1.2.0", netip.MustParsePrefix("10.1.2.0/31"), true},
		{"10.1.2.3", netip.MustParsePrefix("10.1.2.0/30"), false},
		{"10.1.2.2", netip.MustParsePrefix("10.1.2.0/30"), true},
		{"10.1.2.9", netip.MustParsePrefix("10.1.2.9/24"), true}, // an interface's prefix, unmasked
		{"10.1.2.255", netip.MustParsePrefix("10.1.2.9/24"), false},
		{"::1", netip.Prefix{}, false}, // not IPv4
	} {
		if got := Is(netip.MustParseAddr(c.addr), c.net); got != c.want {
			t.Errorf("Is(%s, %s) = %v, want %v", c.addr, c.net, got, c.want)
		}
	}
}

func TestBroadcast(t *testing.T) {
	for p, want := range map[string]string{
		"10.1.2.0/24": "10.1.2.255", "10.1.2.9/24": "10.1.2.255", "10.0.0.0/8": "10.255.255.255",
		"192.168.1.64/26": "192.168.1.127", "10.1.2.3/32": "10.1.2.3", "0.0.0.0/0": "255.255.255.255",
	} {
		if got := Broadcast(netip.MustParsePrefix(p)); got.String() != want {
			t.Errorf("Broadcast(%s) = %s, want %s", p, got, want)
		}
	}
}
