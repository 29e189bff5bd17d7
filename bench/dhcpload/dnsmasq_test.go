package main

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/siteboot/siteboot/internal/netlab"
)

// TestAgainstDnsmasq runs dhcpload from a lab host against two real dnsmasq
// servers on the same LAN: a proxyDHCP server that answers only 100 known
// MACs and an ordinary DHCP server that answers everyone. Only the proxy
// offers count as answers; both servers show up in the per-server table.
func TestAgainstDnsmasq(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq())
	l := netlab.New(t, netlab.Config{})
	proxy, plain, client := l.AddHost("proxy"), l.AddHost("plain"), l.AddHost("client")
	known, err := generateMACs("02:5b", 100)
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"--dhcp-ignore=tag:!known", "--pxe-service=X86-64_EFI,bench,ipxe.efi"}
	for _, m := range known {
		extra = append(extra, "--dhcp-host="+m.String()+",set:known")
	}
	proxy.StartDnsmasq(netlab.DnsmasqConfig{Label: "proxy", Proxy: true, Extra: extra})
	plain.StartDnsmasq(netlab.DnsmasqConfig{Label: "plain", RangeStart: l.Addr(100), RangeEnd: l.Addr(250)})
	unknown, err := generateMACs("02:5c", 20)
	if err != nil {
		t.Fatal(err)
	}
	pa, la := proxy.Addr().String(), plain.Addr().String()
	tests := []struct {
		name   string
		macs   []net.HardwareAddr
		listen string // default 0.0.0.0:68
		opts   options
		want   Result
	}{
		{
			name: "known MACs",
			macs: known,
			opts: options{Outstanding: 8, Requests: 100},
			want: Result{Mode: "closed", Outstanding: 8, MACs: 100, Sent: 100, Offers: 100, Servers: []ServerStat{
				{Server: pa, Replies: 100, ProxyOffers: 100},
			}},
		},
		{
			name:   "relayed to the proxy, answered to giaddr:67",
			macs:   known[:10],
			listen: "0.0.0.0:67",
			opts:   options{Outstanding: 2, Requests: 10, Server: pa + ":67", Giaddr: client.Addr().String()},
			want: Result{Mode: "closed", Outstanding: 2, MACs: 10, Sent: 10, Offers: 10, Servers: []ServerStat{
				{Server: pa, Replies: 10, ProxyOffers: 10},
			}},
		},
		{
			name: "unknown MACs",
			macs: unknown,
			opts: options{Outstanding: 4, Requests: 20, Timeout: 300 * time.Millisecond},
			want: Result{Mode: "closed", Outstanding: 4, MACs: 20, Sent: 20, Lost: 20, LossPct: 100},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			listen := cmpOr(tc.listen, "0.0.0.0:68")
			conn, err := client.ListenPacket(l.Context(), listenConfig(""), "udp4", listen)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tc.opts.Server = cmpOr(tc.opts.Server, "255.255.255.255:67")
			tc.opts.Arch, tc.opts.Duration = 7, 30*time.Second
			if tc.opts.Timeout == 0 {
				tc.opts.Timeout = 2 * time.Second
			}
			res, err := runLoad(l.Context(), tc.opts, tc.macs, conn)
			if err != nil {
				t.Fatal(err)
			}
			plainSeen := splitPlain(&res, la)
			// Foreign: the ordinary server's answers to an earlier case's
			// requests may still arrive (a case ends at its last proxy
			// offer); they are in no server's count.
			ignore := cmpopts.IgnoreFields(Result{}, "Target", "ElapsedS", "OffersPerSec", "Latency", "ScheduleLag", "Unmatched", "Foreign")
			if diff := cmp.Diff(tc.want, res, ignore, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("result mismatch (-want +got):\n%s", diff)
			}
			// The ordinary server sees broadcasts only, and its offers may
			// still be on their way when the last proxy offer ends the run.
			if relayed := tc.opts.Giaddr != ""; relayed != (plainSeen.PlainOffers == 0) ||
				plainSeen.ProxyOffers != 0 || plainSeen.PlainOffers > res.Sent {
				t.Errorf("ordinary server %s: %+v (relayed run: %v)", la, plainSeen, relayed)
			}
			t.Logf("%s: %.0f offers/s, p50 %.3f ms, p99 %.3f ms, %d replies to earlier xids", tc.name, res.OffersPerSec, res.Latency.P50, res.Latency.P99, res.Foreign)
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// splitPlain removes server addr's row from res and returns it.
func splitPlain(res *Result, addr string) ServerStat {
	var out ServerStat
	kept := res.Servers[:0]
	for _, s := range res.Servers {
		if s.Server == addr {
			out = s
			continue
		}
		kept = append(kept, s)
	}
	res.Servers = kept
	return out
}
