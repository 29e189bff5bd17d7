package main

import (
	"net"
	"testing"
	"time"
)

// A datagram read from a socket with timestamps on carries the kernel's
// receive time: after the send, before the read returned, and not the
// later time a slow reader would see.
func TestKernelTimestamp(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := setTimestamps(rx); err != nil {
		t.Fatal(err)
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	// lateRead sends a datagram, reads it wait later, and returns the
	// send, kernel and read times.
	lateRead := func(wait time.Duration) (sent, at, read time.Time) {
		t.Helper()
		sent = time.Now()
		if _, err := tx.Write([]byte("offer")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(wait)
		buf, oob := make([]byte, 64), make([]byte, 128)
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		read = time.Now()
		if err != nil {
			t.Fatal(err)
		}
		return sent, kernelTime(oob[:oobn]), read
	}
	// The first socket to ask for timestamps turns them on from a kernel
	// work queue; until that has run, a busy machine's datagrams are
	// stamped when read. Wait (5 s at most) until one is stamped on
	// arrival, as every one is from then on.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, at, read := lateRead(20 * time.Millisecond); !at.IsZero() && read.Sub(at) >= 10*time.Millisecond {
			break
		}
	}
	sent, at, read := lateRead(200 * time.Millisecond) // the reader is late
	if at.IsZero() || at.Before(sent.Add(-time.Millisecond)) || at.After(read) || read.Sub(at) < 150*time.Millisecond {
		t.Errorf("kernel time %v: want between the send %v and 150 ms before the read %v", at, sent, read)
	}
	if !kernelTime(nil).IsZero() || !kernelTime([]byte{1, 2, 3}).IsZero() {
		t.Error("a missing or malformed control message gave a time")
	}
}
