package tftpd

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/images"
)

// A real machine whose first refusal comes while a flood from random
// addresses has spent the result's budget is logged at Debug; its retry
// once the budget refills, within the stage window, must log at Info: the
// stage limit must not count the line the result budget held back as the
// machine's one line of the window.
func TestResultLineHeldByBudgetIsNotSpent(t *testing.T) {
	set, err := images.Load(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := New(Config{Files: set, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	srv.now = func() time.Time { return now }
	srv.lim = newLimitedLog(log, srv.now, nil)
	for i := range resultBurst + 10 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		srv.logResult(log, netip.AddrPortFrom(a, 2000), "x", slog.LevelInfo, "not_found")
	}
	real := netip.MustParseAddrPort("192.168.1.50:2000")
	buf.Reset()
	srv.logResult(log, real, "pxelinux.0", slog.LevelInfo, "not_found", "client", real.String())
	if strings.Contains(buf.String(), "level=INFO") {
		t.Fatalf("the flood left the result's budget")
	}
	now = now.Add(time.Second) // the budget refilled; the stage window is still on
	buf.Reset()
	srv.logResult(log, real, "pxelinux.0", slog.LevelInfo, "not_found", "client", real.String())
	if !strings.Contains(buf.String(), "level=INFO") || !strings.Contains(buf.String(), "192.168.1.50") {
		t.Fatalf("the real machine's retry after the flood is not logged at Info (its one line was never written): %q", buf.String())
	}
}
