package httpserver

import (
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestUnsentBudget(t *testing.T) {
	page := int64(os.Getpagesize())
	for _, tc := range []struct {
		tcpMem string
		want   int64
	}{
		{"287889\t383855\t575778\n", 383855 * page / 4}, // a 24 GiB host
		{"22305 29741 44610", 29741 * page / 4},         // a 2 GiB appliance
		{"", 256 << 20},
		{"1 2", 256 << 20},
		{"a b c", 256 << 20},
		{"1 0 3", 256 << 20},
	} {
		if got := unsentBudget(tc.tcpMem); got != tc.want {
			t.Errorf("unsentBudget(%q) = %d, want %d", tc.tcpMem, got, tc.want)
		}
	}
}

func TestLowatFor(t *testing.T) {
	s := &Server{unsent: 256 << 20}
	for _, tc := range []struct {
		open int64
		want int
	}{
		{0, maxLowat}, {1, maxLowat}, {64, maxLowat}, {65, 2 << 20}, {256, 1 << 20},
		{1000, 256 << 10}, {2048, 128 << 10}, {100000, minLowat},
	} {
		s.open.Store(tc.open)
		if got := s.lowatFor(); got != tc.want {
			t.Errorf("%d open: lowatFor() = %d, want %d", tc.open, got, tc.want)
		}
	}
}

// A large body goes out with the socket's unsent data capped at the
// connection's share of the budget; a small one leaves the socket as it
// was (no setsockopt per small response), and the cap is set again only
// when the share changes.
func TestSendFileAtBoundsUnsent(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute, UnsentBudget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 2<<20)
	// A client whose window stays under minLowat: the share alone counts
	// (lowatUnder), whatever the window when a body begins.
	c, client := tinyPair(t, s, 1460, 4096)
	lowat := func() int { t.Helper(); return lowatOf(t, c) }
	send := func(n int64) {
		t.Helper()
		done := make(chan struct{})
		go func() { _, _ = io.CopyN(io.Discard, client, 10+n); close(done) }()
		if _, err := c.SendFileAt([]byte("head: 10\r\n"), f, 0, n); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	before := lowat()
	send(4096)
	if got := lowat(); got != before {
		t.Errorf("after a 4 KiB body TCP_NOTSENT_LOWAT = %d, want the socket's default %d", got, before)
	}
	s.open.Store(100) // 64 MiB over 100 connections: 512 KiB each
	send(1 << 20)
	if got := lowat(); got != 512<<10 {
		t.Errorf("after a 1 MiB body with 100 open TCP_NOTSENT_LOWAT = %d, want %d", got, 512<<10)
	}
	s.open.Store(400) // 160 KiB each, down to 128 KiB
	send(1 << 20)
	if got := lowat(); got != 128<<10 {
		t.Errorf("after a 1 MiB body with 400 open TCP_NOTSENT_LOWAT = %d, want %d", got, 128<<10)
	}
}

func TestLowatUnder(t *testing.T) {
	for _, tc := range []struct {
		share int
		wnd   uint32
		want  int
	}{
		{512 << 10, 0, 512 << 10},             // unknown (or a zero window)
		{512 << 10, 1, 512 << 10},             // a stranger's 1-byte window: no cap, no shift by -1
		{512 << 10, 2, 512 << 10},             //
		{512 << 10, 4096, 512 << 10},          // a tiny window: the share, as before the cap
		{512 << 10, minLowat - 1, 512 << 10},  //
		{512 << 10, minLowat, minLowat},       // the smallest capped
		{512 << 10, 256 << 10, 128 << 10},     // iPXE's fixed window
		{512 << 10, 400 << 10, 128 << 10},     // half of it, rounded down
		{512 << 10, 600 << 10, 256 << 10},     //
		{256 << 10, 600 << 10, 256 << 10},     // the share is under half the window
		{4 << 20, fixedWindow - 1, 256 << 10}, // still small: capped
		{4 << 20, fixedWindow, 4 << 20},       // grown: the share
		{maxLowat, 6 << 20, maxLowat},         // an autotuned window
		{minLowat, 128 << 10, minLowat},       //
		{1, 1, 1},                             // tiny: the share
		{100 << 10, 150 << 10, 100 << 10},     // capped, but never above the share
	} {
		if got := lowatUnder(tc.share, tc.wnd); got != tc.want {
			t.Errorf("lowatUnder(%d, %d) = %d, want %d", tc.share, tc.wnd, got, tc.want)
		}
	}
}

// A client with a fixed 256 KiB receive buffer (iPXE's) gets at most half
// its window unsent, not the whole share: what the window cannot take
// would only wait in the socket.
func TestSendFileAtCapsUnsentAtSmallWindow(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute, UnsentBudget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s.open.Store(100) // 512 KiB each
	f, _ := patterned(t, 2<<20)
	c, client := tinyPair(t, s, 1460, 256<<10)
	done := make(chan struct{})
	go func() { _, _ = io.CopyN(io.Discard, client, 10+1<<20); close(done) }()
	if _, err := c.SendFileAt([]byte("head: 10\r\n"), f, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	<-done
	lowat := lowatOf(t, c)
	wnd := c.info.sndWnd()
	if wnd == 0 {
		t.Skip("this kernel does not report the peer's window (tcpi_snd_wnd)")
	}
	if wnd < minLowat || wnd >= fixedWindow {
		t.Fatalf("the client's window was %d when the body began, want one between %d and %d for this test", wnd, minLowat, fixedWindow)
	}
	if lowat != 128<<10 {
		t.Errorf("TCP_NOTSENT_LOWAT = %d with the client's window at %d, want 128 KiB, not the 512 KiB share", lowat, wnd)
	}
}

// A tcp_info read that fails reports no window, not the one an earlier
// read saw: the share then stands.
func TestFailedTCPInfoReportsNoWindow(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := pair(t, s)
	var info tcpInfo
	if err := c.raw.Control(func(fd uintptr) { info.acked(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if info.sndWnd() == 0 {
		t.Skip("this kernel does not report the peer's window (tcpi_snd_wnd)")
	}
	info.acked(-1) // EBADF
	if w := info.sndWnd(); w != 0 {
		t.Errorf("after a failed read sndWnd() = %d, want 0", w)
	}
}

// lowatOf is the TCP_NOTSENT_LOWAT in force on c's socket.
func lowatOf(t *testing.T, c *conn) int {
	t.Helper()
	var v int
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return v
}
