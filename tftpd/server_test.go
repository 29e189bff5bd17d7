package tftpd

import (
	"context"
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/images"
)

func TestNewChecksConfig(t *testing.T) {
	set, err := images.Load(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{"defaults", Config{Files: set}, ""},
		{"no files", Config{}, "Files is required"},
		{"blksize 512", Config{Files: set, MaxBlockSize: 512}, ""},
		{"blksize 65464", Config{Files: set, MaxBlockSize: 65464}, ""},
		{"blksize too small", Config{Files: set, MaxBlockSize: 511}, "MaxBlockSize: 511 is outside 512..65464"},
		{"blksize too large", Config{Files: set, MaxBlockSize: 65465}, "MaxBlockSize: 65465 is outside 512..65464"},
		{"window 1", Config{Files: set, MaxWindowSize: 1}, ""},
		{"window 64", Config{Files: set, MaxWindowSize: 64}, ""},
		{"negative window", Config{Files: set, MaxWindowSize: -1}, "MaxWindowSize: -1 is outside 1..64 (0 for 16)"},
		{"window too large", Config{Files: set, MaxWindowSize: 65}, "MaxWindowSize: 65 is outside 1..64"},
		{"negative retries", Config{Files: set, Retries: -1}, "Retries: -1 must not be negative"},
		{"negative max transfers", Config{Files: set, MaxTransfers: -1}, "MaxTransfers: -1 is outside 1..16384"},
		{"huge max transfers", Config{Files: set, MaxTransfers: 16385}, "MaxTransfers: 16385 is outside 1..16384"},
		{"negative max per source", Config{Files: set, MaxPerSource: -1}, "MaxPerSource: -1 must not be negative"},
		{"negative timeout", Config{Files: set, Timeout: -time.Second}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("New error = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServeNeedsUDP(t *testing.T) {
	set, err := images.Load(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	srv, err := New(Config{Files: set})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("unixgram", filepath.Join(t.TempDir(), "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = srv.Serve(context.Background(), conn)
	if err == nil || !strings.Contains(err.Error(), "want a *net.UDPConn") {
		t.Errorf("Serve(unixgram) = %v, want a *net.UDPConn error", err)
	}
}

func TestServeReturnsWhenConnClosed(t *testing.T) {
	fx := start(t, Config{})
	if err := fx.conn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fx.served:
		if fx.serveErr != nil {
			t.Errorf("Serve = %v, want nil", fx.serveErr)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return 2 s after its socket was closed")
	}
	if len(fx.logs.lines("tftp socket closed")) != 1 {
		t.Error("no log line for the closed socket")
	}
}

// TestTransferEnds checks the results of transfers that do not finish.
func TestTransferEnds(t *testing.T) {
	tests := []struct {
		name   string
		client func(t *testing.T, fx *fixture)
		want   string // result label
	}{
		{"client aborts after the OACK (edk2 tsize probe)", func(t *testing.T, fx *fixture) {
			conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet", "tsize", "0"))
			defer conn.Close()
			p, from := readPacket(t, conn)
			if op := binary.BigEndian.Uint16(p); op != 6 {
				t.Fatalf("got opcode %d, want OACK", op)
			}
			errPkt := append([]byte{0, 5, 0, 8}, "tsize only\x00"...)
			if _, err := conn.WriteToUDP(errPkt, from); err != nil {
				t.Fatal(err)
			}
		}, "aborted"},
		{"client goes quiet", func(t *testing.T, fx *fixture) {
			conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet"))
			defer conn.Close()
			readPacket(t, conn) // DATA 1, never acknowledged
		}, "timeout"},
		{"server stops mid-transfer", func(t *testing.T, fx *fixture) {
			conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet"))
			defer conn.Close()
			_, from := readPacket(t, conn)
			go fx.stop() //nolint:errcheck // the cleanup checks it
			time.Sleep(50 * time.Millisecond)
			ack(t, conn, from, 1)
			for {
				p, _ := readPacket(t, conn)
				if binary.BigEndian.Uint16(p) == 5 {
					if msg := string(p[4:]); !strings.Contains(msg, "shutting down") {
						t.Errorf("ERROR message %q", msg)
					}
					return
				}
			}
		}, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := start(t, Config{Timeout: 50 * time.Millisecond, Retries: 2})
			tc.client(t, fx)
			got := fx.logs.wait("tftp transfer", "file=ipxe.efi", "result=")
			var results []string
			for _, l := range got {
				results = append(results, l[strings.Index(l, "result=")+7:][:len(tc.want)])
			}
			if diff := cmp.Diff([]string{tc.want}, results); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}
