package tftpd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/pin/tftp/v3/netascii"
	"github.com/siteboot/siteboot/images"
)

// TestBlockLimit: MaxBlockSize capped at the arrival interface's MTU less
// the IP, UDP and TFTP headers, never below 512; 512 for an unknown one.
func TestBlockLimit(t *testing.T) {
	set, err := images.Load(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	srv, err := New(Config{Files: set, MaxBlockSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	now := srv.now()
	srv.ifaces.m[7] = ifaceInfo{mtu: 1500, at: now}
	srv.ifaces.m[8] = ifaceInfo{mtu: 9000, at: now}
	srv.ifaces.m[9] = ifaceInfo{mtu: 500, at: now}
	v4, v6 := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1)}, &net.UDPAddr{IP: net.ParseIP("fd00::1")}
	tests := []struct {
		name string
		d    datagram
		want int
	}{
		{"1500 IPv4", datagram{src: v4, ifIndex: 7}, 1468},
		{"1500 IPv6", datagram{src: v6, ifIndex: 7}, 1448},
		{"jumbo, capped at MaxBlockSize", datagram{src: v4, ifIndex: 8}, 8192},
		{"tiny MTU", datagram{src: v4, ifIndex: 9}, 512},
		{"unknown interface", datagram{src: v4}, 512},
	}
	for _, tc := range tests {
		if got := srv.blockLimit(tc.d); got != tc.want {
			t.Errorf("%s: blockLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestNetascii(t *testing.T) {
	fx := start(t, Config{})
	want, err := io.ReadAll(netascii.ToReader(bytes.NewReader(testFiles["undionly.kpxe"])))
	if err != nil {
		t.Fatal(err)
	}
	got := rawGet(t, fx.addr, request(1, "undionly.kpxe", "NetASCII"))
	if got.Size != len(want) || got.SHA256 != sha256.Sum256(want) {
		t.Fatalf("netascii transfer: %d bytes, want %d converted", got.Size, len(want))
	}
}

// TestStrayAndDuplicateAcks: an ACK from another port does not advance
// the transfer, and a repeated ACK of the previous block is not answered
// by sending the block again (the Sorcerer's Apprentice bug).
func TestStrayAndDuplicateAcks(t *testing.T) {
	fx := start(t, Config{Timeout: 400 * time.Millisecond, Retries: 3})
	conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet"))
	defer conn.Close()
	p, tid := readPacket(t, conn)
	wantData(t, p, 1)
	stray := dialRaw(t, tid.String(), []byte{0, opACK, 0, 1})
	defer stray.Close()
	p, _ = readPacket(t, conn) // the retransmission after Timeout
	wantData(t, p, 1)
	ack(t, conn, tid, 1)
	p, _ = readPacket(t, conn)
	wantData(t, p, 2)
	ack(t, conn, tid, 1) // a duplicate
	expectSilence(t, conn, 200*time.Millisecond)
	ack(t, conn, tid, 2)
	p, _ = readPacket(t, conn)
	wantData(t, p, 3)
	if _, err := conn.WriteToUDP([]byte("\x00\x05\x00\x00done\x00"), tid); err != nil {
		t.Fatal(err)
	}
}

func wantData(t *testing.T, p []byte, block uint16) {
	t.Helper()
	if binary.BigEndian.Uint16(p) != opDATA || binary.BigEndian.Uint16(p[2:]) != block {
		t.Fatalf("got %x, want DATA %d", p[:4], block)
	}
}
