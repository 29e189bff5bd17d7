package images

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Log limits for the line every /boot/ request writes: each remote address
// gets remoteLogBurst lines at Info, then one per remoteLogEvery; the next
// one says how many were held back, which go to Debug meanwhile.
const (
	remoteLogBurst = 10
	remoteLogEvery = 6 * time.Second
	remoteLogMax   = 1024
)

func newLogLimit() *ratelimit.Keyed[netip.Addr] {
	return ratelimit.NewKeyed[netip.Addr](remoteLogBurst, remoteLogEvery, remoteLogMax)
}

// logLevel is the level for a line remote (host:port) caused: want, or
// Debug past its limit; and the suppressed attribute, empty when none.
func (s *Set) logLevel(remote string, want slog.Level) (slog.Level, slog.Attr) {
	ap, _ := netip.ParseAddrPort(remote)
	return s.logs.Level(ap.Addr().Unmap(), time.Now(), want)
}
