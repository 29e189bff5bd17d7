package tftpd

import (
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/images"
)

// FuzzParseName checks the request name policy: no panic, and an accepted
// name is the request with at most one leading "/" removed and passes
// images.ValidName.
func FuzzParseName(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		name, err := requestName(raw)
		if err != nil {
			return
		}
		if raw != name && raw != "/"+name {
			t.Fatalf("requestName(%q) = %q: more than one leading slash removed", raw, name)
		}
		if images.ValidName(name) != nil || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") ||
			strings.Contains("/"+name+"/", "/../") {
			t.Fatalf("requestName(%q) accepted %q", raw, name)
		}
	})
}

// FuzzParseRRQ sends each input as a datagram to a running server, then
// checks the server still serves a valid request: pin/tftp's request
// parsing and this package's handlers must survive any packet.
func FuzzParseRRQ(f *testing.F) {
	fx := start(f, Config{Timeout: 20 * time.Millisecond, Retries: 1})
	to, err := net.ResolveUDPAddr("udp4", fx.addr)
	if err != nil {
		f.Fatal(err)
	}
	// One sender for all inputs, never read: answers to it are dropped.
	fuzzConn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = fuzzConn.Close() })
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if _, err := fuzzConn.WriteToUDP(pkt, to); err != nil {
			t.Fatal(err)
		}
		probe(t, fx.addr)
	})
}

// probe fetches the one-block file "tiny" and fails the test unless a
// DATA packet comes back. It retransmits its request every second, as
// firmware does: a fresh socket may reuse the port of an earlier probe
// whose transfer the server has not retired yet, and a repeated request of
// a running transfer is ignored by design. Other packets are skipped (a
// late packet meant for an earlier socket on the same port).
func probe(t *testing.T, server string) {
	t.Helper()
	req := request(1, "tiny", "octet")
	conn := dialRaw(t, server, req)
	defer conn.Close()
	buf := make([]byte, 65536)
	for try := 0; try < 5; {
		if err := conn.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			try++
			send(t, conn, server, req)
			continue
		}
		if n >= 4 && binary.BigEndian.Uint16(buf) == 3 && binary.BigEndian.Uint16(buf[2:]) == 1 {
			ack(t, conn, from, 1)
			return
		}
	}
	t.Fatal("the server no longer serves a valid request (5 tries, 1 s apart)")
}

// FuzzParseRequest checks the request parser: no panic, an accepted
// packet is an RRQ or WRQ of at most maxRequest bytes whose name and mode
// hold no NUL, and negotiation never grants a block size outside
// 512..limit, nor a window outside 1..limit or over 64 KiB of blocks, and
// the OACK says the window used.
func FuzzParseRequest(f *testing.F) {
	f.Add(request(1, "ipxe.efi", "octet", "blksize", "1468", "tsize", "0"))
	f.Add(request(1, "ipxe.efi", "octet", "tsize", "0", "blksize", "1468", "windowsize", "4"))
	f.Add(request(1, "ipxe.efi", "octet", "blksize", "65464", "windowsize", "65535"))
	f.Add(request(1, "ipxe.efi", "octet", "windowsize", "0", "windowsize", "70000"))
	f.Add(request(2, "x", "netascii"))
	f.Add([]byte{0, 1, 'a', 0})
	f.Add([]byte{0, 1, 'a', 0, 'o', 0, 'b', 'l', 'k', 's', 'i', 'z', 'e', 0, '9', '9', '9', '9', '9', '9'})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		r, err := parseRequest(pkt)
		if err != nil {
			return
		}
		if (r.op != opRRQ && r.op != opWRQ) || len(pkt) > maxRequest {
			t.Fatalf("accepted op %d, %d bytes", r.op, len(pkt))
		}
		if strings.ContainsRune(r.name, 0) || strings.ContainsRune(r.mode, 0) {
			t.Fatalf("NUL in name %q or mode %q", r.name, r.mode)
		}
		for _, limit := range []int{512, 1468, 65464} {
			for _, wlimit := range []int{1, 16, 64} {
				n, w, oack := r.negotiate(limit, wlimit, 1)
				if n < 512 || n > limit {
					t.Fatalf("negotiate(%d, %d) = blksize %d for options %q", limit, wlimit, n, r.opts)
				}
				if w < 1 || w > wlimit || (w > 1 && w*n > maxWindowBytes) {
					t.Fatalf("negotiate(%d, %d) = window %d of %d-byte blocks for options %q", limit, wlimit, w, n, r.opts)
				}
				if got, ok := parseOptions(oackPacket(oack)[2:])["windowsize"]; ok && got != strconv.Itoa(w) || !ok && w != 1 {
					t.Fatalf("negotiate(%d, %d) = window %d, OACK says %q", limit, wlimit, w, got)
				}
			}
		}
	})
}
