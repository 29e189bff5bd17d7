package ratelimit

import (
	"log/slog"
	"sync"
	"time"
)

// Once lets the first call for a key through and refuses the key's
// further calls until window has passed since the one it let through: one
// log line per machine and boot stage, however many packets the stage
// takes. A key's window restarts only when a call is let through.
//
// It remembers at most max keys, least recently seen first out, so a peer
// sending random keys cannot grow it. A new key always gets a place: it
// takes the place of a key unseen for a window (as good as forgotten), or,
// when every remembered key is still live (a flood, or more machines than
// max at once), of the least recently seen one, within a token bucket of
// spillBurst places at once and one more per spillEvery. So a flood of new
// keys costs at most max lines per window plus the spill bucket's, and a
// real machine's line competes only with the flood while it lasts: once
// it ends, keys expire and every new key is let through again. Evicting a live key can only let one of
// its lines through early, never hold one back.
type Once[K comparable] struct {
	window     time.Duration
	max        int
	spillBurst float64
	spillEvery time.Duration

	mu          sync.Mutex
	nodes       map[K]*onceNode[K]
	head, tail  *onceNode[K] // head most recently seen
	spill       bucket
	refused     uint64 // calls refused, ever
	refusedKeys uint64 // of those, calls of keys that found no place
}

type onceNode[K comparable] struct {
	key        K
	logged     time.Time // when a call was last let through
	seen       time.Time // when the key last called
	held       uint64    // calls refused since logged
	prev, next *onceNode[K]
}

// NewOnce returns a Once of window per key for at most maxKeys keys, with a
// spill bucket of spillBurst places and one more per spillEvery for new
// keys while all remembered ones are live. Each value is at least 1 (a
// nanosecond for durations).
func NewOnce[K comparable](window time.Duration, maxKeys, spillBurst int, spillEvery time.Duration) *Once[K] {
	burst := float64(max(spillBurst, 1))
	return &Once[K]{
		window:     max(window, time.Nanosecond),
		max:        max(maxKeys, 1),
		spillBurst: burst,
		spillEvery: max(spillEvery, time.Nanosecond),
		nodes:      make(map[K]*onceNode[K]),
		spill:      bucket{tokens: burst},
	}
}

// Allow reports whether key's call at now is let through; when it is,
// held is how many of key's calls were refused since its last one that
// was (for a "suppressed N" attribute). A clock that steps back restarts
// the key's window rather than stretching it.
func (o *Once[K]) Allow(key K, now time.Time) (ok bool, held uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := o.nodes[key]; n != nil {
		n.seen = now
		o.toFront(n)
		if now.Before(n.logged) {
			n.logged = now
		}
		if now.Sub(n.logged) < o.window {
			n.held++
			o.refused++
			return false, 0
		}
		held, n.held, n.logged = n.held, 0, now
		return true, held
	}
	if len(o.nodes) >= o.max {
		old := o.tail
		if live := now.Sub(old.seen) < o.window && !now.Before(old.seen); live && !o.takeSpill(now) {
			o.refused++
			o.refusedKeys++
			return false, 0
		}
		o.unlink(old)
		delete(o.nodes, old.key)
	}
	n := &onceNode[K]{key: key, logged: now, seen: now}
	o.nodes[key] = n
	o.pushFront(n)
	return true, 0
}

// Forget drops key, so that its next call is let through as a first one:
// for a call let through here whose line another limit then held back,
// which must not count as the key's one line of the window.
func (o *Once[K]) Forget(key K) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := o.nodes[key]; n != nil {
		o.unlink(n)
		delete(o.nodes, key)
	}
}

// Level is the level of a line keyed by key: want when Allow lets it
// through, Debug otherwise; and the attribute suppressed=N for the lines
// held back since key's last one (empty, which slog leaves out, when none).
func (o *Once[K]) Level(key K, now time.Time, want slog.Level) (slog.Level, slog.Attr) {
	ok, held := o.Allow(key, now)
	switch {
	case !ok:
		return slog.LevelDebug, slog.Attr{}
	case held > 0:
		return want, slog.Uint64("suppressed", held)
	}
	return want, slog.Attr{}
}

// takeSpill takes a token of the spill bucket at now.
func (o *Once[K]) takeSpill(now time.Time) bool {
	b := &o.spill
	if now.After(b.at) {
		b.tokens = min(o.spillBurst, b.tokens+float64(now.Sub(b.at))/float64(o.spillEvery))
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Refused is how many calls were refused in all: refused repeats of a
// remembered key, plus (keys) calls of new keys that found no place.
func (o *Once[K]) Refused() (all, keys uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused, o.refusedKeys
}

// Len is how many keys are remembered.
func (o *Once[K]) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.nodes)
}

func (o *Once[K]) pushFront(n *onceNode[K]) {
	n.prev, n.next = nil, o.head
	if o.head != nil {
		o.head.prev = n
	}
	o.head = n
	if o.tail == nil {
		o.tail = n
	}
}

func (o *Once[K]) unlink(n *onceNode[K]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		o.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		o.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

func (o *Once[K]) toFront(n *onceNode[K]) {
	if o.head == n {
		return
	}
	o.unlink(n)
	o.pushFront(n)
}
