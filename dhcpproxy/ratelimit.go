package dhcpproxy

import (
	"sync"
	"time"
)

// Unknown machines retry every few seconds; one Info line per MAC per
// unknownLogEvery is enough, the rest go to Debug.
const (
	unknownLogEvery = time.Minute
	unknownLogMax   = 4096
)

// logLimiter lets one log line per key through per interval. It holds at
// most max keys; when full it starts over, which only lets a few extra lines
// through.
type logLimiter struct {
	every time.Duration
	max   int

	mu   sync.Mutex
	last map[string]time.Time
}

func newLogLimiter(every time.Duration, max int) *logLimiter {
	return &logLimiter{every: every, max: max, last: make(map[string]time.Time)}
}

// allow reports whether key may log at now, and if so notes it.
func (l *logLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every && !now.Before(t) {
		return false
	}
	if len(l.last) >= l.max {
		clear(l.last)
	}
	l.last[key] = now
	return true
}
