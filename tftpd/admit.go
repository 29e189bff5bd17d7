package tftpd

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Why a request was dropped without an answer, or its transfer cancelled:
// the values of the reason label of siteboot_tftp_requests_dropped_total.
const (
	dropDuplicate    = "duplicate"             // the same client port already fetches that file
	dropMaxTransfers = "max_transfers"         // MaxTransfers are running
	dropMaxPerSource = "max_per_source"        // MaxPerSource of this address are running
	dropMalformed    = "malformed"             // not a request this server can parse
	dropNotHost      = "not_host"              // from a broadcast, multicast or unspecified address, or port 0
	dropNoResources  = "no_resources"          // no fd (EMFILE, ENFILE) or socket for it
	dropErrorLimit   = "error_limit"           // refused, and over the budget of ERROR answers
	dropPreempted    = "preempted_unconfirmed" // cancelled unacknowledged for a newer request
)

// preemptGrace is how long a transfer whose client has acknowledged
// nothing keeps its place against a new request while MaxTransfers are
// running. A client that sent its request from its own address
// acknowledges the OACK or DATA 1 within milliseconds: edk2 and iPXE
// answer from their receive path, and edk2 polls its NIC every 10 ms
// (50 ms in old builds). A request with a forged source is never
// acknowledged. 500 ms is ten times the slowest such poll plus a LAN
// round trip, and half of DefaultTimeout, so by then a forged request has
// cost one OACK or DATA packet. To keep a real client's request out, forged ones must refill
// every place within that half second (MaxTransfers/0.5 s, 2,048
// requests/s by default) rather than once per Timeout×Retries. The price:
// while the table is full, a real client whose first packet or ACK is
// lost can lose its place before the server's retransmission; its own
// retransmitted request then starts it again.
const preemptGrace = 500 * time.Millisecond

// transferKey names a transfer: the client's address and port (its TID)
// and the file name as sent.
type transferKey struct {
	client netip.AddrPort
	file   string
}

// transfer is an admitted transfer's place in the admission table.
type transfer struct {
	key   transferKey
	since time.Time // when it was admitted
	// prev and next link the unconfirmed transfers, oldest first; queued
	// says whether this one is among them.
	prev, next *transfer
	queued     bool
	conn       *net.UDPConn // the transfer's socket once opened
	preempted  bool
}

// preemption is a transfer that gave up its place to a newer request.
type preemption struct {
	key  transferKey
	age  time.Duration
	conn *net.UDPConn // to close, nil if not opened yet
}

// admission tracks the running transfers and decides whether one more
// may start. Its maps hold at most max entries. The transfers whose
// client has not acknowledged anything yet are also in a list, oldest
// first, from which a new request may take a place when all are taken.
type admission struct {
	max, perSource int
	grace          time.Duration

	mu             sync.Mutex
	running        map[transferKey]*transfer
	bySource       map[netip.Addr]int
	oldest, newest *transfer // the unconfirmed list
}

func newAdmission(max, perSource int, grace time.Duration) *admission {
	return &admission{max: max, perSource: perSource, grace: grace,
		running: map[transferKey]*transfer{}, bySource: map[netip.Addr]int{}}
}

// admit reserves a place for k at now, or returns why not (a drop
// reason). When MaxTransfers are running, the oldest unconfirmed transfer
// admitted at least grace before now gives up its place: it is released
// and returned as p, and the caller closes its socket, which ends it.
// When k's address has MaxPerSource running, the oldest unconfirmed one
// of that address gives up its place the same way: requests forged with
// a machine's address, never acknowledged, would otherwise hold all of
// its places for Timeout×Retries and keep the machine itself out.
func (a *admission) admit(k transferKey, now time.Time) (t *transfer, p *preemption, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var v *transfer
	switch {
	case a.running[k] != nil:
		return nil, nil, dropDuplicate
	case a.bySource[k.client.Addr()] >= a.perSource:
		if v = a.oldestOf(k.client.Addr(), now); v == nil {
			return nil, nil, dropMaxPerSource
		}
	case len(a.running) >= a.max:
		if v = a.oldest; v == nil || now.Sub(v.since) < a.grace {
			return nil, nil, dropMaxTransfers
		}
	}
	if v != nil {
		v.preempted = true
		a.remove(v)
		p = &preemption{key: v.key, age: now.Sub(v.since), conn: v.conn}
	}
	t = &transfer{key: k, since: now}
	a.running[k] = t
	a.bySource[k.client.Addr()]++
	a.enqueue(t)
	return t, p, ""
}

// oldestOf is the oldest unconfirmed transfer to addr admitted at least
// grace before now, or nil. The list holds at most max transfers.
func (a *admission) oldestOf(addr netip.Addr, now time.Time) *transfer {
	for v := a.oldest; v != nil && now.Sub(v.since) >= a.grace; v = v.next {
		if v.key.client.Addr() == addr {
			return v
		}
	}
	return nil
}

// attach records t's socket, so that a preemption can close it. It
// returns false if t was preempted already: then the caller closes conn.
func (a *admission) attach(t *transfer, conn *net.UDPConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.preempted {
		return false
	}
	t.conn = conn
	return true
}

// confirm marks t as acknowledged by its client: it is never preempted.
func (a *admission) confirm(t *transfer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dequeue(t)
}

// release frees the place admit reserved for t (a preemption has freed
// it already).
func (a *admission) release(t *transfer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.remove(t)
}

// wasPreempted reports whether t gave up its place to a newer request.
func (a *admission) wasPreempted(t *transfer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return t.preempted
}

// count is the number of transfers admitted and not yet released.
func (a *admission) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

// remove takes t out of the table; a.mu is held.
func (a *admission) remove(t *transfer) {
	if a.running[t.key] != t {
		return
	}
	a.dequeue(t)
	delete(a.running, t.key)
	if a.bySource[t.key.client.Addr()]--; a.bySource[t.key.client.Addr()] <= 0 {
		delete(a.bySource, t.key.client.Addr())
	}
}

// enqueue appends t to the unconfirmed list; a.mu is held. Requests are
// admitted in time order, so the list stays sorted by since.
func (a *admission) enqueue(t *transfer) {
	t.prev, t.queued = a.newest, true
	if a.newest != nil {
		a.newest.next = t
	} else {
		a.oldest = t
	}
	a.newest = t
}

// dequeue takes t out of the unconfirmed list if it is in it; a.mu is
// held.
func (a *admission) dequeue(t *transfer) {
	if !t.queued {
		return
	}
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		a.oldest = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		a.newest = t.prev
	}
	t.prev, t.next, t.queued = nil, nil, false
}
