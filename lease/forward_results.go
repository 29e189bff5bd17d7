package lease

import "sync"

// resultRing is how long the state machine's results are kept: enough
// for a follower to find the result of a write it forwarded, which it
// looks up as soon as it applied the write's index.
const resultRing = 1024

// results keeps the state machine's result of the last resultRing log
// entries applied, by index, and wakes those waiting for an index.
type results struct {
	mu    sync.Mutex
	slots [resultRing]struct {
		index uint64
		res   any
	}
	wake chan struct{} // closed, and replaced, on every put
}

func (r *results) put(index uint64, res any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.slots[index%resultRing]
	s.index, s.res = index, res
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

// get returns the result of index if it is still kept, and a channel
// closed at the next put.
func (r *results) get(index uint64) (res any, ok bool, next <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.slots[index%resultRing]; s.index == index && index != 0 {
		return s.res, true, nil
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return nil, false, r.wake
}
