package dhcpproxy

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Log limits for lines a client can cause at will (unknown machines, UUID
// mismatches, refused relays). Unknown machines retry every few seconds,
// so one line per MAC per unknownLogEvery is enough. Each source (the
// relay, or the sender on the arrival interface) gets sourceLogBurst
// lines, then one per sourceLogEvery; the next line it gets says how many
// were held back. Held-back lines go to Debug.
const (
	unknownLogEvery = time.Minute
	unknownLogMax   = 4096
	sourceLogBurst  = 10
	sourceLogEvery  = 6 * time.Second
	sourceLogMax    = 1024
)

// Log limits for the lines of a machine with an entry (answers, a missing
// boot file): a boot takes a handful of answers (firmware, then iPXE, on
// 67 and 4011), so each MAC gets answerLogBurst lines, then one per
// answerLogEvery. Anyone who sees a booting machine's broadcast can send
// requests with its MAC, so even these are bounded.
const (
	answerLogBurst = 16
	answerLogEvery = 15 * time.Second
	answerLogMax   = 4096
)

// logSource is where a packet came from, as far as log limits go: the
// arrival interface and the relay (or, for a direct client, its source
// address, 0.0.0.0 for most).
type logSource struct {
	iface string
	addr  netip.Addr
}

type logLimits struct {
	perMAC    *ratelimit.Keyed[string]
	perSource *ratelimit.Keyed[logSource]
	perAnswer *ratelimit.Keyed[string] // by MAC
}

func newLogLimits() logLimits {
	return logLimits{
		perMAC:    ratelimit.NewKeyed[string](1, unknownLogEvery, unknownLogMax),
		perSource: ratelimit.NewKeyed[logSource](sourceLogBurst, sourceLogEvery, sourceLogMax),
		perAnswer: ratelimit.NewKeyed[string](answerLogBurst, answerLogEvery, answerLogMax),
	}
}

// answerLevel is level for a line of a machine with an entry while its MAC
// may log, Debug otherwise; and how many of its lines were held back.
func (l logLimits) answerLevel(level slog.Level, mac string, now time.Time) (slog.Level, uint64) {
	if ok, held := l.perAnswer.Allow(mac, now); ok {
		return level, held
	}
	return slog.LevelDebug, 0
}

// level returns the level a client-caused line is written at: want when
// the MAC (if any) and the source may log now, Debug otherwise; and how
// many of the source's lines were held back before this one.
func (l logLimits) level(want slog.Level, mac string, src logSource, now time.Time) (slog.Level, uint64) {
	if mac != "" {
		if ok, _ := l.perMAC.Allow(mac, now); !ok {
			return slog.LevelDebug, 0
		}
	}
	ok, held := l.perSource.Allow(src, now)
	if !ok {
		return slog.LevelDebug, 0
	}
	return want, held
}

// sourceOf is the log-limit source of a packet that arrived as in.
func sourceOf(d *decision, in Arrival) logSource {
	if d.relay.IsValid() {
		return logSource{iface: in.Iface, addr: d.relay}
	}
	return logSource{iface: in.Iface, addr: sourceAddr(in)}
}
