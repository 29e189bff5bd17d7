package pxe

import (
	"net"
	"net/netip"
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
	})
}
