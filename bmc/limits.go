package bmc

import (
	"context"
	"net/netip"
	"sync"
)

// keyedLock is one lock per BMC IP; an entry lives while someone holds or
// waits for it.
type keyedLock struct {
	mu sync.Mutex
	m  map[netip.Addr]*lockEntry
}

type lockEntry struct {
	ch   chan struct{} // holds a token while locked
	refs int
}

func newKeyedLock() *keyedLock { return &keyedLock{m: make(map[netip.Addr]*lockEntry)} }

// lock waits for ip's lock until ctx ends.
func (k *keyedLock) lock(ctx context.Context, ip netip.Addr) (func(), error) {
	k.mu.Lock()
	e := k.m[ip]
	if e == nil {
		e = &lockEntry{ch: make(chan struct{}, 1)}
		k.m[ip] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, ip)
		}
		k.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
