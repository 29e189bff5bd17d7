package tftpd

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// logRate is a token bucket: burst lines at once, then one per every.
type logRate struct {
	burst int
	every time.Duration
}

// The budgets of log lines, per reason (a transfer result or a drop
// reason). Anyone who can send a datagram to the TFTP port can cause a
// line, so none is unbounded: a line that finds its bucket empty is
// counted and its count printed with the next line of that reason (or by
// flush) as suppressed=N.
const (
	// Transfers and refusals: one line per client, file and result per
	// ratelimit.StageWindow (the boot-stage policy: a machine's first stage
	// writes one line however often it retries), and within this budget
	// per result in all: a storm of a thousand machines fits in the burst;
	// a flood from made-up sources is held to 32 lines a second per result.
	resultBurst = 1024
	resultEvery = time.Second / 32
	// The lines held back go to Debug within this budget per result: at
	// Debug, too, anyone can cause them.
	repeatBurst = 64
	repeatEvery = time.Second / 8
	// Requests dropped unanswered, and listener errors.
	dropBurst = 16
	dropEvery = time.Second
)

// limitedLog writes log lines through a token bucket per reason, one set
// of buckets (internal/ratelimit) per rate. Reasons and rates come from
// fixed sets, so it stays small.
type limitedLog struct {
	log        *slog.Logger
	now        func() time.Time
	suppressed func(reason string) // counts a suppressed line

	mu    sync.Mutex
	rates map[logRate]*ratelimit.Keyed[string]
}

// maxReasons bounds the reasons one rate's buckets remember; the set of
// reasons is fixed and far smaller.
const maxReasons = 64

func newLimitedLog(log *slog.Logger, now func() time.Time, suppressed func(string)) *limitedLog {
	return &limitedLog{log: log, now: now, suppressed: suppressed, rates: map[logRate]*ratelimit.Keyed[string]{}}
}

// Log writes msg at level with attrs to log (a child of the limiter's
// logger, carrying per-request fields) if reason's bucket has a token.
// Lines the handler would drop anyway cost no token.
func (l *limitedLog) Log(log *slog.Logger, level slog.Level, reason string, rate logRate, msg string, attrs ...any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	ok, n := l.buckets(rate).Allow(reason, l.now())
	if !ok {
		l.suppressed(reason)
		return
	}
	if n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, attrs...)
}

func (l *limitedLog) buckets(rate logRate) *ratelimit.Keyed[string] {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.rates[rate]
	if k == nil {
		k = ratelimit.NewKeyed[string](rate.burst, rate.every, maxReasons)
		l.rates[rate] = k
	}
	return k
}

// flush reports, once its bucket has a token again, each reason whose
// lines were suppressed; all of them when force is set (at shutdown).
func (l *limitedLog) flush(force bool) {
	l.mu.Lock()
	sets := make([]*ratelimit.Keyed[string], 0, len(l.rates))
	for _, k := range l.rates {
		sets = append(sets, k)
	}
	l.mu.Unlock()
	now := l.now()
	for _, k := range sets {
		for reason, n := range k.Drain(now, force) {
			l.log.Info("tftp log lines suppressed", "reason", reason, "suppressed", n)
		}
	}
}

// stageTFTP labels the boot-stage limiter's lines.
const stageTFTP = "tftp"

// logResult logs a transfer's or refusal's line for client and file: the
// first per result within ratelimit.StageWindow at level (with
// suppressed=N for the lines of that key held back before it), within
// resultBurst and resultEvery per result (suppressed_result=N); every
// other one at Debug, within repeatBurst and repeatEvery per result.
func (s *Server) logResult(log *slog.Logger, client netip.AddrPort, file string, level slog.Level, result string, attrs ...any) {
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	key := client.Addr().Unmap().String() + " " + result + " " + file
	lv, held := s.stages.Level(key, stageTFTP, level, s.now())
	if lv == level {
		ok, n := s.lim.buckets(logRate{resultBurst, resultEvery}).Allow(result, s.now())
		if ok {
			if held.Key != "" {
				attrs = append(attrs, held)
			}
			if n > 0 {
				attrs = append(attrs, "suppressed_result", n)
			}
			log.Log(ctx, level, "tftp transfer", attrs...)
			return
		}
		// Not written: the key's line of the window is still owed (a
		// flood from other addresses must not spend it).
		s.stages.Unlog(key, stageTFTP, level)
		s.stages.Held(stageTFTP)
	}
	s.lim.Log(log, slog.LevelDebug, result+" (repeat)", logRate{repeatBurst, repeatEvery}, "tftp transfer", attrs...)
}

// logDrop logs msg within dropBurst and dropEvery per reason.
func (s *Server) logDrop(log *slog.Logger, level slog.Level, reason, msg string, attrs ...any) {
	s.lim.Log(log, level, reason, logRate{dropBurst, dropEvery}, msg, attrs...)
}
