package netlab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDnsmasqLeasesToDhclient runs the site's ordinary DHCP server on one
// host and ISC dhclient (Debian isc-dhcp-client) on another.
func TestDnsmasqLeasesToDhclient(t *testing.T) {
	Require(t, NeedsDnsmasq(), Needs{Binaries: []string{"dhclient"}})
	l := New(t, Config{})
	srv, cli := l.AddHost("dhcp"), l.AddHost("client")
	d := srv.StartDnsmasq(DnsmasqConfig{})

	events := filepath.Join(l.Dir(), "dhclient-events")
	script := filepath.Join(l.Dir(), "dhclient-script")
	body := fmt.Sprintf("#!/bin/sh\necho \"$reason $interface $new_ip_address\" >> %s\n", events)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(l.Dir(), "dhclient.conf")
	if err := os.WriteFile(conf, []byte("timeout 30;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cli.Start("dhclient", "dhclient", "-4", "-d", "-v", "-1", "-cf", conf,
		"-lf", filepath.Join(l.Dir(), "dhclient.leases"), "-pf", filepath.Join(l.Dir(), "dhclient.pid"),
		"-sf", script, Iface)
	line, err := WaitFile(l.Context(), events, "BOUND")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dhclient bound after %v: %s", time.Since(start).Round(time.Millisecond), line)

	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("script line %q: want reason, interface, address", line)
	}
	addr, err := netip.ParseAddr(f[2])
	if err != nil {
		t.Fatalf("leased address: %v", err)
	}
	if addr.Compare(l.Addr(100)) < 0 || addr.Compare(l.Addr(199)) > 0 {
		t.Errorf("leased %s, outside the pool %s-%s", addr, l.Addr(100), l.Addr(199))
	}
	leases := d.Leases()
	if len(leases) != 1 {
		t.Fatalf("dnsmasq leases = %q, want one", leases)
	}
	got := strings.Fields(leases[0])[1:3]
	if diff := cmp.Diff([]string{cli.MAC().String(), addr.String()}, got); diff != "" {
		t.Errorf("dnsmasq lease (mac, ip) mismatch (-want +got):\n%s", diff)
	}
}
