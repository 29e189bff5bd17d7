package tftpd

import (
	"net/netip"
	"sync"
)

// Why a request was dropped without an answer: the values of the reason
// label of siteboot_tftp_requests_dropped_total.
const (
	dropDuplicate    = "duplicate"      // the same client port already fetches that file
	dropMaxTransfers = "max_transfers"  // MaxTransfers are running
	dropMaxPerSource = "max_per_source" // MaxPerSource of this address are running
	dropMalformed    = "malformed"      // not a request this server can parse
	dropNoResources  = "no_resources"   // no fd (EMFILE, ENFILE) or socket for it
)

// transferKey names a transfer: the client's address and port (its TID)
// and the file name as sent.
type transferKey struct {
	client netip.AddrPort
	file   string
}

// admission tracks the running transfers and decides whether one more
// may start. Its maps hold at most max entries.
type admission struct {
	max, perSource int

	mu       sync.Mutex
	running  map[transferKey]struct{}
	bySource map[netip.Addr]int
}

func newAdmission(max, perSource int) *admission {
	return &admission{max: max, perSource: perSource,
		running: map[transferKey]struct{}{}, bySource: map[netip.Addr]int{}}
}

// admit reserves a place for k, or returns why not (a drop reason).
func (a *admission) admit(k transferKey) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case hasKey(a.running, k):
		return dropDuplicate
	case len(a.running) >= a.max:
		return dropMaxTransfers
	case a.bySource[k.client.Addr()] >= a.perSource:
		return dropMaxPerSource
	}
	a.running[k] = struct{}{}
	a.bySource[k.client.Addr()]++
	return ""
}

// release frees the place admit reserved for k.
func (a *admission) release(k transferKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !hasKey(a.running, k) {
		return
	}
	delete(a.running, k)
	if a.bySource[k.client.Addr()]--; a.bySource[k.client.Addr()] <= 0 {
		delete(a.bySource, k.client.Addr())
	}
}

// count is the number of transfers admitted and not yet released.
func (a *admission) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

func hasKey(m map[transferKey]struct{}, k transferKey) bool {
	_, ok := m[k]
	return ok
}
