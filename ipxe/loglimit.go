package ipxe

import (
	"log/slog"
	"net/netip"
	"time"
)

// Log limits for lines a client causes at will (every line of a request:
// scripts served, unknown machines, refusals): each remote address gets remoteLogBurst lines, then
// one per remoteLogEvery; the next line it gets says how many were held
// back. Held-back lines go to Debug.
const (
	remoteLogBurst = 10
	remoteLogEvery = 6 * time.Second
	remoteLogMax   = 1024
)

// logLevel is the level a client-caused line from remote is written at,
// and the suppressed attribute for its lines held back before it.
func (s *Server) logLevel(remote netip.Addr, want slog.Level) (slog.Level, slog.Attr) {
	return s.logs.Level(remote, s.cfg.Now(), want)
}
