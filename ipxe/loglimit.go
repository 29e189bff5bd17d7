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
// and how many of its lines were held back before it.
func (s *Server) logLevel(remote netip.Addr, want slog.Level) (slog.Level, uint64) {
	ok, held := s.logs.Allow(remote, s.cfg.Now())
	if !ok {
		return slog.LevelDebug, 0
	}
	return want, held
}

// suppressed is the log attribute for held-back lines; nothing when none.
func suppressed(n uint64) slog.Attr {
	if n == 0 {
		return slog.Attr{}
	}
	return slog.Uint64("suppressed", n)
}
