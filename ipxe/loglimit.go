package ipxe

import (
	"log/slog"
	"net/netip"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Log limits for lines a client causes at will (every line of a request:
// scripts served, unknown machines, refusals) follow the boot-stage
// policy of internal/ratelimit: one line per remote address, stage and
// level per remoteLogEvery, the rest at Debug, counted in
// siteboot_ipxe_log_lines_suppressed_total and a summary line once a
// minute; the next line let through says how many were held back. A
// booting machine writes one line for /boot.ipxe and one for /ipxe.
const (
	remoteLogBurst = 1
	remoteLogEvery = ratelimit.StageWindow
)

// Stages, the "stage" label of siteboot_ipxe_log_lines_suppressed_total.
const (
	stageBootstrap = "bootstrap" // /boot.ipxe served
	stageScript    = "script"    // /ipxe served for a machine with an entry
	stageUnknown   = "unknown"   // /ipxe for a machine without one
	stageRefused   = "refused"   // any request refused
)

// logLevel is the level a client-caused line of stage from remote is
// written at, and the suppressed attribute for its lines held back before
// it.
func (s *Server) logLevel(remote netip.Addr, stage string, want slog.Level) (slog.Level, slog.Attr) {
	now := s.cfg.Now()
	s.logs.SummaryDue(s.log, "ipxe: log lines suppressed", now)
	return s.logs.Level(addrString(remote), stage, want, now)
}
