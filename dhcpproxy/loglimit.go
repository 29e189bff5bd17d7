package dhcpproxy

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Log limits for lines a client can cause at will (unknown machines, UUID
// mismatches, refused relays). Unknown machines retry every few seconds,
// so one line per MAC and stage per unknownLogEvery is enough (the
// boot-stage policy of internal/ratelimit). Each source (the relay, or
// the sender on the arrival interface) gets sourceLogBurst lines, then one
// per sourceLogEvery; the next line it gets says how many were held back.
// All sources together get allLogBurst lines, then one per allLogEvery: a
// sender on port 4011 chooses its source address per packet, so the
// per-source limit alone let one host write a line for each of
// sourceLogMax addresses every sourceLogEvery (170 lines/s). Held-back
// lines go to Debug, and the periodic summary counts them by stage.
const (
	unknownLogEvery = ratelimit.StageWindow
	sourceLogBurst  = 10
	sourceLogEvery  = 6 * time.Second
	sourceLogMax    = 1024
	allLogBurst     = 100
	allLogEvery     = time.Second / 4
)

// A reply the socket refuses (a full send buffer under a flood, a route
// gone) is written at Warn sendLogBurst times per interface, then once per
// sendLogEvery with the count held back; the rest go to Debug, and
// siteboot_dhcp_send_errors_total counts every one.
const (
	sendLogBurst = 3
	sendLogEvery = 10 * time.Second
	sendLogMax   = 256 // interfaces
)

// The lines of a machine with an entry (answers, a missing boot file)
// follow the boot-stage policy: one line per MAC, stage (firmware or
// iPXE) and level per answerLogEvery, however many DISCOVERs and REQUESTs
// on 67 and 4011 the stage takes; the rest at Debug, counted in
// siteboot_dhcp_log_lines_suppressed_total and the periodic summary line.
// Anyone who sees a booting machine's broadcast can send requests with its
// MAC, so these are bounded too.
const (
	answerLogBurst = 1
	answerLogEvery = ratelimit.StageWindow
)

// Boot stages, the "stage" label of siteboot_dhcp_log_lines_suppressed_total.
const (
	stagePXE     = "pxe"     // the firmware's DISCOVER and REQUEST
	stageIPXE    = "ipxe"    // iPXE's
	stageUnknown = "unknown" // a machine without an entry, or one its pin refuses
	stageRelay   = "relay"   // a refused relay
)

// logSource is where a packet came from, as far as log limits go: the
// arrival interface and the relay (or, for a direct client, its source
// address, 0.0.0.0 for most).
type logSource struct {
	iface string
	addr  netip.Addr
}

type logLimits struct {
	stages    *ratelimit.Stages // answers and unknown machines, by MAC and stage
	perSource *ratelimit.Keyed[logSource]
	all       *ratelimit.Keyed[struct{}] // every source's lines together
	send      *ratelimit.Keyed[string]   // replies the socket refused, by interface
}

func newLogLimits(suppressed func(stage string)) logLimits {
	return logLimits{
		stages:    ratelimit.NewStages(suppressed),
		perSource: ratelimit.NewKeyed[logSource](sourceLogBurst, sourceLogEvery, sourceLogMax),
		all:       ratelimit.NewKeyed[struct{}](allLogBurst, allLogEvery, 1),
		send:      ratelimit.NewKeyed[string](sendLogBurst, sendLogEvery, sendLogMax),
	}
}

// answerLevel is level for the first line of a machine with an entry in
// stage within the window, Debug for the rest; and how many of its lines
// were held back before this one.
func (l logLimits) answerLevel(level slog.Level, mac, stage string, now time.Time) (slog.Level, slog.Attr) {
	return l.stages.Level(mac, stage, level, now)
}

// level returns the level a client-caused line is written at: want when
// the MAC (if any) may log now in its stage, the source may log now and
// all sources together may, Debug otherwise; and how many of the source's
// lines were held back before this one. The source's limit is asked
// first: a source over it must not spend the others' shared lines; a
// line the shared limit then refuses gives the source its token back.
func (l logLimits) level(want slog.Level, stage, mac string, src logSource, now time.Time) (slog.Level, slog.Attr) {
	if mac != "" {
		if lv, _ := l.stages.Level(mac, stage, want, now); lv != want {
			return slog.LevelDebug, slog.Attr{}
		}
	}
	ok, held := l.perSource.Allow(src, now)
	if ok {
		if ok, _ = l.all.Allow(struct{}{}, now); !ok {
			// Not written: the source keeps its token, and its next
			// line counts this one as held back.
			l.perSource.Unspend(src, held)
		}
	}
	if !ok {
		if mac != "" {
			// Not written: the machine's line of the window is still owed
			// (a flood of random MACs from its source must not spend it).
			l.stages.Unlog(mac, stage, want)
		}
		l.stages.Held(stage)
		return slog.LevelDebug, slog.Attr{}
	}
	if held > 0 {
		return want, slog.Uint64("suppressed", held)
	}
	return want, slog.Attr{}
}

// sourceOf is the log-limit source of a packet that arrived as in.
func sourceOf(d *decision, in Arrival) logSource {
	if d.relay.IsValid() {
		return logSource{iface: in.Iface, addr: d.relay}
	}
	return logSource{iface: in.Iface, addr: sourceAddr(in)}
}
