// Package ratelimit keeps token buckets by key for limits a peer on the
// network must not be able to reset: the number of keys remembered is
// bounded, and a key beyond the bound shares one overflow bucket instead
// of pushing other keys out. The boot path uses it for per-source log
// lines (Level) and for how fast new machines enter the discovery ledger;
// Drain reports what a log still owes "suppressed N" lines for. Once and
// Stages are the boot-stage log policy: one line per machine and stage per
// window, in an LRU of bounded size (once.go, stages.go).
package ratelimit

import (
	"log/slog"
	"sync"
	"time"
)

// Keyed is a set of token buckets, one per key: each holds up to burst
// tokens and gains one every interval. It is safe for concurrent use and
// allocates only when it first sees a key.
type Keyed[K comparable] struct {
	burst float64
	every time.Duration
	max   int

	mu        sync.Mutex
	buckets   map[K]bucket
	overflow  bucket
	lastSweep time.Time
}

type bucket struct {
	tokens     float64
	at         time.Time
	suppressed uint64
}

// NewKeyed returns buckets of burst tokens refilled one per every, for at
// most maxKeys keys at a time. burst and maxKeys are at least 1, every at
// least a nanosecond.
func NewKeyed[K comparable](burst int, every time.Duration, maxKeys int) *Keyed[K] {
	return &Keyed[K]{
		burst:    float64(max(burst, 1)),
		every:    max(every, time.Nanosecond),
		max:      max(maxKeys, 1),
		buckets:  make(map[K]bucket),
		overflow: bucket{tokens: float64(max(burst, 1))},
	}
}

// Allow takes a token from key's bucket at now and reports whether there
// was one. When there was, suppressed is how many calls the bucket refused
// since the last one it allowed, so that a log line can say how many lines
// it stands for. A clock that steps back refills nothing.
func (k *Keyed[K]) Allow(key K, now time.Time) (ok bool, suppressed uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, known := k.buckets[key]
	if !known {
		b = bucket{tokens: k.burst, at: now}
	}
	useOverflow := !known && len(k.buckets) >= k.max && !k.sweepLocked(now)
	if useOverflow {
		b = k.overflow
	}
	ok, suppressed = k.takeLocked(&b, now)
	if useOverflow {
		k.overflow = b
	} else {
		k.buckets[key] = b
	}
	return ok, suppressed
}

// Unspend gives back the token a call Allow allowed took, for a call a
// later limit then refused: the call counts as refused, together with
// the suppressed count Allow returned for it, so that the key's next
// allowed call reports them all.
func (k *Keyed[K]) Unspend(key K, suppressed uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, known := k.buckets[key]
	if !known {
		b = k.overflow
	}
	b.tokens = min(k.burst, b.tokens+1)
	b.suppressed += suppressed + 1
	if known {
		k.buckets[key] = b
	} else {
		k.overflow = b
	}
}

func (k *Keyed[K]) takeLocked(b *bucket, now time.Time) (bool, uint64) {
	if now.After(b.at) {
		b.tokens = min(k.burst, b.tokens+float64(now.Sub(b.at))/float64(k.every))
		b.at = now
	}
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// sweepLocked forgets keys whose bucket is full again (they are as good as
// new; a count of refused calls they held is lost), at most once per
// refill interval, and reports whether there is room for a new key now.
func (k *Keyed[K]) sweepLocked(now time.Time) bool {
	if !k.lastSweep.IsZero() && now.Sub(k.lastSweep) < k.every && !now.Before(k.lastSweep) {
		return false
	}
	k.lastSweep = now
	for key, b := range k.buckets {
		if b.tokens+float64(now.Sub(b.at))/float64(k.every) >= k.burst {
			delete(k.buckets, key)
		}
	}
	return len(k.buckets) < k.max
}

// Level is the level a log line keyed by key is written at: want while
// key's bucket allows it, Debug past the limit; and the attribute
// suppressed=N counting the lines held back before this one (an empty
// attribute, which slog leaves out, when none).
func (k *Keyed[K]) Level(key K, now time.Time, want slog.Level) (slog.Level, slog.Attr) {
	ok, held := k.Allow(key, now)
	switch {
	case !ok:
		return slog.LevelDebug, slog.Attr{}
	case held > 0:
		return want, slog.Uint64("suppressed", held)
	}
	return want, slog.Attr{}
}

// Drain reports, for each key whose calls were refused since its last
// allowed one, how many were: for a log, the lines a "suppressed N" line
// must still account for. A key is reported once its bucket holds a token
// again, which the report takes; with force (at shutdown) every such key
// is reported. Its count starts again at zero.
func (k *Keyed[K]) Drain(now time.Time, force bool) map[K]uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out map[K]uint64
	for key, b := range k.buckets {
		if b.suppressed == 0 {
			continue
		}
		if now.After(b.at) {
			b.tokens = min(k.burst, b.tokens+float64(now.Sub(b.at))/float64(k.every))
			b.at = now
		}
		if !force && b.tokens < 1 {
			k.buckets[key] = b
			continue
		}
		if out == nil {
			out = make(map[K]uint64)
		}
		out[key] = b.suppressed
		b.tokens, b.suppressed = max(0, b.tokens-1), 0
		k.buckets[key] = b
	}
	return out
}

// Len returns how many keys the buckets remember.
func (k *Keyed[K]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}
