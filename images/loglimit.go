package images

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// The line every /boot/ request writes follows the boot-stage policy of
// internal/ratelimit: one line at Info per remote address and file a
// minute (a machine fetching its kernel and initrd writes two, however
// many range requests it makes), the rest at Debug; the next line let
// through says how many were held back, and a summary line once a minute
// counts them all.
const stageBootFile = "boot_file"

func newLogLimit() *ratelimit.Stages { return ratelimit.NewStages(nil) }

// logLevel is the level for a line remote (host:port) caused about file:
// want, or Debug past its limit; and the suppressed attribute, empty when
// none.
func (s *Set) logLevel(remote, file string, want slog.Level) (slog.Level, slog.Attr) {
	now := time.Now()
	s.logs.SummaryDue(s.log, "boot files: log lines suppressed", now)
	ap, _ := netip.ParseAddrPort(remote)
	return s.logs.Level(ap.Addr().Unmap().String()+" "+file, stageBootFile, want, now)
}
