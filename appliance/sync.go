package appliance

import (
	"context"
	"sync"
)

// The local parts that follow the replicated state — the image cache's
// wanted set and pins, and the discovered ledger, which forgets a MAC once it
// has a live entry — are kept in step by one path: follow, which runs
// syncOnce after every state change. A write through the API waits until
// that path has caught up with the state version its command produced
// (waitSynced), so it returns with the cache already knowing what changed,
// and a sync error reaches the caller who caused it.

// follow runs syncOnce after every change of the state until ctx ends.
func (a *Appliance) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.state.Changed():
		}
		a.syncAt()
	}
}

// syncAt syncs and records the state version the sync has seen at least.
func (a *Appliance) syncAt() error {
	v := a.state.Version()
	err := a.syncOnce()
	if err != nil {
		a.log.Error("image cache: wanted images refused", "err", err)
	}
	a.synced.advance(v, err)
	return err
}

// syncOnce hands the replicated wanted images and pins to the cache and
// drops discovered machines that now have a live entry (one whose UUID pin,
// if any, the sighting matches).
func (a *Appliance) syncOnce() error {
	err := a.syncImages()
	now := a.now()
	for _, m := range a.ledger.List() {
		// A sighting the entry's UUID pin refused stays listed.
		if e, ok := a.state.Lookup(m.GetMac(), now); ok && e.AcceptsUUID(m.GetProductUuid()) {
			a.ledger.Forget(m.GetMac())
		}
	}
	return err
}

// waitSynced waits until follow has synced the state as of now (after a
// write was applied), and returns that sync's error.
func (a *Appliance) waitSynced(ctx context.Context) error {
	return a.synced.wait(ctx, a.state.Version())
}

// syncTracker records the newest state version the local parts have synced.
type syncTracker struct {
	mu      sync.Mutex
	version uint64
	err     error
	changed chan struct{} // closed and replaced at every advance
}

func newSyncTracker() *syncTracker { return &syncTracker{changed: make(chan struct{})} }

func (t *syncTracker) advance(v uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v >= t.version {
		t.version, t.err = v, err
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *syncTracker) wait(ctx context.Context, v uint64) error {
	for {
		t.mu.Lock()
		done, err, ch := t.version >= v, t.err, t.changed
		t.mu.Unlock()
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
