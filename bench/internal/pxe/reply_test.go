package pxe

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

var testMAC = net.HardwareAddr{0x02, 0x5b, 0, 0, 0, 7}

// offer builds a reply with the insomniacslk/dhcp encoder.
func offer(t testing.TB, yiaddr net.IP, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	base := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{1, 2, 3, 4}),
		dhcpv4.WithHwAddr(testMAC),
		dhcpv4.WithYourIP(yiaddr),
		dhcpv4.WithServerIP(net.IPv4(10, 99, 1, 2)),
	}
	d, err := dhcpv4.New(append(base, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	d.OpCode = dhcpv4.OpcodeBootReply
	return d.ToBytes()
}

func TestParseReply(t *testing.T) {
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 99, 1, 2)))
	pxe := dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient"))
	proxy := offer(t, net.IPv4zero, sid, pxe)
	srv := netip.MustParseAddr("10.99.1.2")
	withFile := offer(t, net.IPv4zero, sid, pxe, dhcpv4.WithOption(dhcpv4.OptBootFileName("undionly.kpxe\x00")),
		dhcpv4.WithOption(dhcpv4.OptTFTPServerName("10.99.1.3")))
	fileField := offer(t, net.IPv4zero, sid, pxe)
	copy(fileField[108:], "ipxe.efi")
	httpOffer := offer(t, net.IPv4zero, sid, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient")),
		dhcpv4.WithOption(dhcpv4.OptBootFileName("http://10.99.1.2:8080/boot/ipxe.efi")))
	tests := []struct {
		name      string
		pkt       []byte
		want      Reply
		wantProxy bool
		wantHTTP  bool
		wantErr   bool
	}{
		{
			name: "proxy offer",
			pkt:  proxy,
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.IPv4Unspecified(), Siaddr: srv,
				ServerID: netip.MustParseAddr("10.99.1.2"), VendorClass: "PXEClient", CHAddr: [6]byte(testMAC)},
			wantProxy: true,
		},
		{
			name: "plain offer",
			pkt:  offer(t, net.IPv4(10, 99, 1, 150), sid),
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.MustParseAddr("10.99.1.150"), Siaddr: srv,
				ServerID: netip.MustParseAddr("10.99.1.2"), CHAddr: [6]byte(testMAC)},
		},
		{
			name: "offer with an address and PXEClient is not a proxy offer",
			pkt:  offer(t, net.IPv4(10, 99, 1, 150), pxe),
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.MustParseAddr("10.99.1.150"), Siaddr: srv,
				VendorClass: "PXEClient", CHAddr: [6]byte(testMAC)},
		},
		{
			name: "ack",
			pkt:  offer(t, net.IPv4zero, pxe, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck)),
			want: Reply{XID: 0x01020304, MsgType: 5, Yiaddr: netip.IPv4Unspecified(), Siaddr: srv,
				VendorClass: "PXEClient", CHAddr: [6]byte(testMAC)},
		},
		{
			name: "option 67 wins over the file field, NUL trimmed; option 66",
			pkt:  withFile,
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.IPv4Unspecified(), Siaddr: srv,
				ServerID: srv, VendorClass: "PXEClient", CHAddr: [6]byte(testMAC), BootFile: "undionly.kpxe", TFTPServer: "10.99.1.3"},
			wantProxy: true,
		},
		{
			name: "boot file from the BOOTP file field",
			pkt:  fileField,
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.IPv4Unspecified(), Siaddr: srv,
				ServerID: srv, VendorClass: "PXEClient", CHAddr: [6]byte(testMAC), BootFile: "ipxe.efi"},
			wantProxy: true,
		},
		{
			name: "HTTPClient offer is an HTTP proxy offer, not a PXE one",
			pkt:  httpOffer,
			want: Reply{XID: 0x01020304, MsgType: MsgOffer, Yiaddr: netip.IPv4Unspecified(), Siaddr: srv,
				ServerID: srv, VendorClass: "HTTPClient", CHAddr: [6]byte(testMAC), BootFile: "http://10.99.1.2:8080/boot/ipxe.efi"},
			wantHTTP: true,
		},
		{name: "truncated header", pkt: proxy[:100], wantErr: true},
		{name: "request op", pkt: append([]byte{1}, proxy[1:]...), wantErr: true},
		{name: "no cookie", pkt: withByte(proxy, 236, 0), wantErr: true},
		{name: "option past end", pkt: append(append([]byte(nil), proxy[:240]...), 53, 5, 2), wantErr: true},
		{name: "no message type", pkt: append(append([]byte(nil), proxy[:240]...), 255), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReply(tc.pkt)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseReply() error = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("ParseReply() mismatch (-want +got):\n%s", diff)
			}
			if got.IsProxyOffer() != tc.wantProxy {
				t.Errorf("IsProxyOffer() = %v, want %v", got.IsProxyOffer(), tc.wantProxy)
			}
			if got.IsHTTPProxyOffer() != tc.wantHTTP {
				t.Errorf("IsHTTPProxyOffer() = %v, want %v", got.IsHTTPProxyOffer(), tc.wantHTTP)
			}
		})
	}
}

// withoutEnd cuts a packet of the encoder at its End option, dropping the
// padding after it, so that options can be appended.
func withoutEnd(b []byte) []byte {
	for i := optionsOffset; i < len(b); {
		switch b[i] {
		case 255:
			return append([]byte(nil), b[:i]...)
		case 0:
			i++
		default:
			i += 2 + int(b[i+1])
		}
	}
	return b
}

func withByte(b []byte, i int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[i] = v
	return c
}

// FuzzParseReply checks that hostile datagrams never panic the parser and
// that what it accepts agrees with insomniacslk/dhcp's decoder.
func FuzzParseReply(f *testing.F) {
	f.Add(offer(f, net.IPv4zero, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient"))))
	f.Add(offer(f, net.IPv4(10, 0, 0, 9)))
	f.Add([]byte{2})
	// PXE offers whose option 43 the parser reads: dnsmasq's BIOS offer,
	// siteboot's, and one with several servers and menu items.
	pxeClass := dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient"))
	for _, v := range [][]byte{dnsmasqBIOSVendor, {6, 1, 8, 255}, {71, 4, 0x80, 0, 0, 0, 255},
		{8, 14, 0x80, 1, 2, 10, 0, 0, 1, 10, 0, 0, 2, 0x80, 2, 0, 9, 7, 0x80, 2, 1, 'b', 0x80, 1, 0, 255}} {
		f.Add(offer(f, net.IPv4zero, pxeClass, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, v)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReply(b)
		if err != nil {
			return
		}
		if len(b) < optionsOffset || b[0] != bootReply || r.MsgType == 0 {
			t.Fatalf("accepted a non-reply: %x", b)
		}
		d, err := dhcpv4.FromBytes(b)
		if err != nil {
			return // the library is stricter (hlen, overload): fine
		}
		if uint32(d.TransactionID[0])<<24|uint32(d.TransactionID[1])<<16|uint32(d.TransactionID[2])<<8|uint32(d.TransactionID[3]) != r.XID {
			t.Fatalf("xid %08x, library says %v", r.XID, d.TransactionID)
		}
		if !d.YourIPAddr.Equal(r.Yiaddr.AsSlice()) {
			t.Fatalf("yiaddr %v, library says %v", r.Yiaddr, d.YourIPAddr)
		}
		// What the PXE options say must be within option 43.
		vendor := d.Options.Get(dhcpv4.OptionVendorSpecificInformation)
		for _, s := range r.PXE.Servers {
			if 3+4*len(s.Addrs) > len(vendor) {
				t.Fatalf("%d boot servers of type %#x from a %d-byte option 43", len(s.Addrs), s.Type, len(vendor))
			}
		}
		for _, m := range r.PXE.Menu {
			if 3+len(m.Desc) > len(vendor) {
				t.Fatalf("menu item %q from a %d-byte option 43", m.Desc, len(vendor))
			}
		}
	})
}

// dnsmasqBIOSVendor is option 43 of dnsmasq 2.90's proxy offer to a BIOS
// DISCOVER with one x86PC pxe-service ("boot"), as captured: discovery
// control 3, prompt (timeout 0, "PXE"), boot servers (type 0x8000, one
// address: 10.99.16.2), menu (type 0x8000, "boot"), End.
var dnsmasqBIOSVendor = []byte{6, 1, 3, 10, 4, 0, 80, 88, 69, 8, 7, 128, 0, 1, 10, 99, 16, 2, 9, 7, 128, 0, 4, 98, 111, 111, 116, 255}

func TestParseReplyPXEOptions(t *testing.T) {
	vendor := func(b []byte) dhcpv4.Modifier {
		return dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, b)
	}
	pxe := dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient"))
	noSiaddr := dhcpv4.WithServerIP(net.IPv4zero)
	server := netip.MustParseAddr("10.99.16.2")
	tests := []struct {
		name     string
		pkt      []byte
		want     PXEOptions
		wantOpts bool // HasPXEOptions
		wantErr  string
	}{
		{
			name: "dnsmasq BIOS offer: menu and boot servers",
			pkt:  offer(t, net.IPv4zero, pxe, noSiaddr, vendor(dnsmasqBIOSVendor)),
			want: PXEOptions{Discovery: true, Control: CtlNoBroadcast | CtlNoMulticast,
				Servers: []BootServer{{Type: 0x8000, Addrs: []netip.Addr{server}}},
				Menu:    []MenuItem{{Type: 0x8000, Desc: "boot"}}},
			wantOpts: true,
		},
		{
			name: "siteboot offer: discovery control 8 only",
			pkt:  offer(t, net.IPv4zero, pxe, vendor([]byte{6, 1, 8, 255}), dhcpv4.WithOption(dhcpv4.OptBootFileName("ipxe.efi"))),
			want: PXEOptions{Discovery: true, Control: CtlUseFile}, wantOpts: true,
		},
		{
			name: "dnsmasq UEFI offer: no option 43, next server, no file",
			pkt:  offer(t, net.IPv4zero, pxe),
		},
		{
			name: "pads, a sub-option the parser skips, no End",
			pkt:  offer(t, net.IPv4zero, pxe, vendor([]byte{0, 0, 1, 4, 224, 0, 1, 2, 0})),
		},
		{
			name: "dnsmasq's boot server ACK: the item echoed",
			pkt:  offer(t, net.IPv4zero, pxe, vendor([]byte{71, 4, 0x80, 0, 0, 1, 255}), dhcpv4.WithMessageType(dhcpv4.MessageTypeAck)),
			want: PXEOptions{Item: &BootItem{Type: 0x8000, Layer: 1}},
		},
		{
			name: "two instances of option 43 are one (RFC 3396)",
			pkt: func() []byte {
				// Option 43 split across two instances, before the End.
				b := withoutEnd(offer(t, net.IPv4zero, pxe, noSiaddr))
				b = append(b, 43, 5, 9, 7, 0x80, 0, 4)
				return append(b, 43, 4, 'b', 'o', 'o', 't', 255)
			}(),
			want:     PXEOptions{Discovery: true, Menu: []MenuItem{{Type: 0x8000, Desc: "boot"}}},
			wantOpts: true,
		},
		{
			name: "two servers of two types, two menu items",
			pkt:  offer(t, net.IPv4zero, pxe, vendor([]byte{8, 14, 0x80, 1, 2, 10, 0, 0, 1, 10, 0, 0, 2, 0x80, 2, 0, 9, 7, 0x80, 2, 1, 'b', 0x80, 1, 0, 255})),
			want: PXEOptions{Discovery: true,
				Servers: []BootServer{{Type: 0x8001, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}}, {Type: 0x8002}},
				Menu:    []MenuItem{{Type: 0x8002, Desc: "b"}, {Type: 0x8001}}},
			wantOpts: true,
		},
		{
			name: "option 43 of a reply that is not PXEClient is not read",
			pkt:  offer(t, net.IPv4zero, vendor([]byte{9, 200})),
		},
		{name: "sub-option past the option", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{9, 7, 0x80, 0})), wantErr: "sub-option 9 runs past"},
		{name: "boot item of 3 bytes", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{71, 3, 0x80, 0, 0})), wantErr: "sub-option 71 (boot item) has 3 bytes"},
		{name: "discovery control of 2 bytes", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{6, 2, 8, 8})), wantErr: "sub-option 6 (discovery control) has 2 bytes"},
		{name: "boot server entry short of its addresses", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{8, 7, 0x80, 0, 2, 10, 0, 0, 1})), wantErr: "sub-option 8 (boot servers): entry 1 runs past"},
		{name: "boot server entry short of its count", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{8, 2, 0x80, 0})), wantErr: "sub-option 8 (boot servers): entry 1 runs past"},
		{name: "menu item short of its description", pkt: offer(t, net.IPv4zero, pxe, vendor([]byte{9, 8, 0x80, 0, 1, 'a', 0x80, 1, 5, 'b'})), wantErr: "sub-option 9 (boot menu): item 2 runs past"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReply(tc.pkt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseReply() error = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.PXE, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("PXE options mismatch (-want +got):\n%s", diff)
			}
			if got.HasPXEOptions() != tc.wantOpts {
				t.Errorf("HasPXEOptions() = %v, want %v", got.HasPXEOptions(), tc.wantOpts)
			}
		})
	}
}

// HasPXEOptions decides whether iPXE asks a proxy again at port 4011.
func TestHasPXEOptions(t *testing.T) {
	srv := netip.MustParseAddr("10.0.0.2")
	tests := []struct {
		name string
		r    Reply
		want bool
	}{
		{name: "next server and file", r: Reply{Siaddr: srv, BootFile: "http://10.0.0.2/boot.ipxe"}, want: true},
		{name: "file without next server (dnsmasq's dhcp-boot without an address)", r: Reply{Siaddr: netip.IPv4Unspecified(), BootFile: "http://10.0.0.2/boot.ipxe"}},
		{name: "next server without file (dnsmasq's UEFI offer)", r: Reply{Siaddr: srv}},
		{name: "menu", r: Reply{PXE: PXEOptions{Menu: []MenuItem{{Type: 0x8000}}}}, want: true},
		{name: "nothing", r: Reply{}},
	}
	for _, tc := range tests {
		if got := tc.r.HasPXEOptions(); got != tc.want {
			t.Errorf("%s: HasPXEOptions() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestServerFor(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	p := PXEOptions{Servers: []BootServer{{Type: 0x8000}, {Type: 0x8001, Addrs: []netip.Addr{a, b}}, {Type: 0x8000, Addrs: []netip.Addr{b}}}}
	if got, ok := p.ServerFor(0x8001); !ok || got != a {
		t.Errorf("ServerFor(0x8001) = %v, %v; want %v", got, ok, a)
	}
	// An entry without addresses is passed over for the next of its type.
	if got, ok := p.ServerFor(0x8000); !ok || got != b {
		t.Errorf("ServerFor(0x8000) = %v, %v; want %v", got, ok, b)
	}
	if _, ok := p.ServerFor(0x8002); ok {
		t.Error("ServerFor(0x8002) found a server")
	}
}
