package lease

import (
	"errors"

	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
)

// externalResult is what applying an ExternalEpoch returns: the highest
// external epoch after it.
type externalResult struct{ highest uint64 }

// applyExternal raises the highest external epoch. A control plane may
// skip epochs, so any higher one is taken; an equal or lower one (a stale
// or replayed proposal) changes nothing, and epoch 0, which is no epoch,
// is skipped.
func (f *fsm) applyExternal(index uint64, e *statev1.ExternalEpoch) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.GetEpoch() == 0 {
		f.skip(index, errors.New("lease: external epoch 0 skipped: epochs start at 1"))
	} else if e.GetEpoch() > f.external {
		f.external = e.GetEpoch()
	}
	return externalResult{highest: f.external}
}

func (f *fsm) externalEpoch() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.external
}
