package dhcpproxy

import (
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestHandleWithConfig(t *testing.T) {
	advertise := func(c *Config) { c.AdvertiseIP = net.IPv4(192, 0, 2, 10) }
	fromAdvertise := func(s *summary) { s.SIAddr, s.Opt54, s.SName = "192.0.2.10", "192.0.2.10", "192.0.2.10" }
	tests := []struct {
		name string
		mod  func(*Config)
		c    handleCase
	}{
		{name: "advertise ip replaces the interface address", mod: advertise,
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
				want: outcome{Decision: "offer", Reply: offer("ipxe.efi", fromAdvertise)}}},
		{name: "advertise ip also goes into derived http URLs", mod: advertise,
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withIPXE),
				want: outcome{Decision: "offer", Reply: offer("http://192.0.2.10:8080/boot.ipxe", fromAdvertise)}}},
		{name: "REQUEST naming the advertise ip is ours", mod: advertise,
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(192, 0, 2, 10)))),
				want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK, fromAdvertise)}}},
		{name: "advertise ip makes an address-less interface usable", mod: advertise,
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 0),
				in:   Arrival{Iface: "eth9", Port: ServerPort},
				want: outcome{Decision: "offer", Reply: offer("undionly.kpxe", fromAdvertise)}}},
		{name: "http advertise is the base of script URLs",
			mod: func(c *Config) { c.HTTPAdvertise = "http://10.0.0.9:9090/sb/" },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withIPXE),
				want: outcome{Decision: "offer", Reply: offer("http://10.0.0.9:9090/sb/boot.ipxe")}}},
		{name: "http advertise is the base of HTTP boot URLs",
			mod: func(c *Config) { c.HTTPAdvertise = "https://10.0.0.9" },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 16),
				want: outcome{Decision: "offer", Reply: offer("https://10.0.0.9/boot/ipxe.efi", asHTTP)}}},
		{name: "port 80 is left out of derived URLs",
			mod: func(c *Config) { c.HTTPPort = 0 },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withIPXE),
				want: outcome{Decision: "offer", Reply: offer("http://10.0.0.2/boot.ipxe")}}},
		{name: "a boot file with a hostile name is refused",
			mod: func(c *Config) { c.BootFiles = bootFileMap{"x86_64-efi": "../etc/passwd"} },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
				want: outcome{Decision: "no-bootfile"}}},
		{name: "a boot file longer than the file field is refused",
			mod: func(c *Config) { c.BootFiles = bootFileMap{"x86_64-efi": strings.Repeat("a", 128)} },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
				want: outcome{Decision: "no-bootfile"}}},
		{name: "a boot file of exactly 127 bytes fits",
			mod: func(c *Config) { c.BootFiles = bootFileMap{"x86_64-efi": strings.Repeat("a", 127)} },
			c: handleCase{name: "x", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
				want: outcome{Decision: "offer", Reply: offer(strings.Repeat("a", 127))}}},
		{name: "without a discovery sink unknown machines are still not answered",
			mod: func(c *Config) { c.Discovery = nil },
			c: handleCase{name: "x", pkt: pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7),
				want: outcome{Decision: "unknown-mac"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runHandleCases(t, []handleCase{tt.c}, tt.mod) })
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error
	}{
		{"missing entries", func(c *Config) { c.Entries = nil }, "needs Entries"},
		{"missing gate", func(c *Config) { c.Gate = nil }, "needs Entries"},
		{"missing boot files", func(c *Config) { c.BootFiles = nil }, "needs Entries"},
		{"ipv6 advertise ip", func(c *Config) { c.AdvertiseIP = net.ParseIP("2001:db8::1") }, "not a unicast IPv4"},
		{"broadcast advertise ip", func(c *Config) { c.AdvertiseIP = net.IPv4bcast }, "not a unicast IPv4"},
		{"port out of range", func(c *Config) { c.HTTPPort = 70000 }, "out of range"},
		{"http advertise with a name", func(c *Config) { c.HTTPAdvertise = "http://boot.example:8080" }, "IPv4 literal"},
		{"http advertise tftp scheme", func(c *Config) { c.HTTPAdvertise = "tftp://10.0.0.2" }, "http:// or https://"},
		{"http advertise with a query", func(c *Config) { c.HTTPAdvertise = "http://10.0.0.2/?a=b" }, "no credentials"},
		{"http advertise with credentials", func(c *Config) { c.HTTPAdvertise = "http://u:p@10.0.0.2/" }, "no credentials"},
		{"http advertise too long", func(c *Config) { c.HTTPAdvertise = "http://10.0.0.2/" + strings.Repeat("p", 80) }, "longer than"},
		{"http advertise unparsable", func(c *Config) { c.HTTPAdvertise = "http://10.0.0.2:port" }, "http advertise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Entries: newTestState(t), Gate: &testGate{}, BootFiles: testBootFiles}
			tt.mod(&cfg)
			_, err := New(cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tt.want) || !strings.HasPrefix(got, "dhcpproxy: ") {
				t.Errorf("New error = %q, want one containing %q", got, tt.want)
			}
		})
	}
}

func TestArchName(t *testing.T) {
	got := map[uint16]string{}
	for _, code := range []uint16{0, 1, 6, 7, 9, 10, 11, 15, 16, 17, 18, 19, 20, 65535} {
		got[code] = ArchName(code)
	}
	want := map[uint16]string{
		0: "bios", 1: "arch-1", 6: "x86-efi", 7: "x86_64-efi", 9: "x86_64-efi", 10: "arm32-efi",
		11: "arm64-efi", 15: "x86-efi-http", 16: "x86_64-efi-http", 17: "arch-17",
		18: "arm32-efi-http", 19: "arm64-efi-http", 20: "arch-20", 65535: "arch-65535",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ArchName (-want +got):\n%s", diff)
	}
}
