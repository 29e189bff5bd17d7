package tftpd

import (
	"context"
	"log/slog"
	"sync"
	"time"
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
	// One line per transfer or refusal: a rack's boot storm fits in the
	// burst; a flood is held to 8 lines a second per result.
	resultBurst = 64
	resultEvery = time.Second / 8
	// Requests dropped unanswered, and listener errors.
	dropBurst = 16
	dropEvery = time.Second
)

// limitedLog writes log lines through a token bucket per reason. Reasons
// come from a fixed set, so its map stays small.
type limitedLog struct {
	log        *slog.Logger
	now        func() time.Time
	suppressed func(reason string) // counts a suppressed line

	mu      sync.Mutex
	buckets map[string]*logBucket
}

type logBucket struct {
	rate       logRate
	tokens     float64
	last       time.Time
	suppressed int
}

func newLimitedLog(log *slog.Logger, now func() time.Time, suppressed func(string)) *limitedLog {
	return &limitedLog{log: log, now: now, suppressed: suppressed, buckets: map[string]*logBucket{}}
}

// Log writes msg at level with attrs to log (a child of the limiter's
// logger, carrying per-request fields) if reason's bucket has a token.
// Lines the handler would drop anyway cost no token.
func (l *limitedLog) Log(log *slog.Logger, level slog.Level, reason string, rate logRate, msg string, attrs ...any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	ok, n := l.take(reason, rate)
	if !ok {
		l.suppressed(reason)
		return
	}
	if n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, attrs...)
}

// take takes a token of reason's bucket and returns the lines suppressed
// since the last one taken.
func (l *limitedLog) take(reason string, rate logRate) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[reason]
	if b == nil {
		b = &logBucket{rate: rate, tokens: float64(rate.burst), last: now}
		l.buckets[reason] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

func (b *logBucket) refill(now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(b.rate.burst), b.tokens+float64(d)/float64(b.rate.every))
		b.last = now
	}
}

// flush reports, once its bucket has a token again, each reason whose
// lines were suppressed; all of them when force is set (at shutdown).
func (l *limitedLog) flush(force bool) {
	l.mu.Lock()
	type pending struct {
		reason string
		n      int
	}
	var out []pending
	now := l.now()
	for reason, b := range l.buckets {
		b.refill(now)
		if b.suppressed == 0 || (!force && b.tokens < 1) {
			continue
		}
		b.tokens = max(0, b.tokens-1)
		out = append(out, pending{reason, b.suppressed})
		b.suppressed = 0
	}
	l.mu.Unlock()
	for _, p := range out {
		l.log.Info("tftp log lines suppressed", "reason", p.reason, "suppressed", p.n)
	}
}

// logResult logs a transfer's or refusal's line within resultBurst and
// resultEvery per result.
func (s *Server) logResult(log *slog.Logger, level slog.Level, result string, attrs ...any) {
	s.lim.Log(log, level, result, logRate{resultBurst, resultEvery}, "tftp transfer", attrs...)
}

// logDrop logs msg within dropBurst and dropEvery per reason.
func (s *Server) logDrop(log *slog.Logger, level slog.Level, reason, msg string, attrs ...any) {
	s.lim.Log(log, level, reason, logRate{dropBurst, dropEvery}, msg, attrs...)
}
