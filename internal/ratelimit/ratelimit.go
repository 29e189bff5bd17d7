// Package ratelimit keeps token buckets by key for limits a peer on the
// network must not be able to reset: the number of keys remembered is
// bounded, and a key beyond the bound shares one overflow bucket instead
// of pushing other keys out. The boot path uses it for per-source log
// lines and for how fast new machines enter the discovery ledger.
package ratelimit

import (
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

// Len returns how many keys the buckets remember.
func (k *Keyed[K]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}
