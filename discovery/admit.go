package discovery

import (
	"net/netip"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// RepeatGap is how long after its first sighting a machine must be seen
// again to count as seen repeatedly. Firmware retries a DISCOVER after
// about 4 s and keeps asking; a made-up MAC sent once never qualifies.
const RepeatGap = 2 * time.Second

// maxAdmitKeys bounds the prefixes and sources the new-machine limits
// remember; more share one bucket (see package ratelimit).
const maxAdmitKeys = 1024

// admission limits how fast machines the ledger does not hold enter it:
// per MAC prefix (the OUI) and per source (a configured relay's address,
// else the arrival interface). It is called under the ledger's lock.
type admission struct {
	byPrefix *ratelimit.Keyed[string]
	bySource *ratelimit.Keyed[sourceKey]
}

type sourceKey struct {
	iface string
	relay netip.Addr
}

func newAdmission(burst int, every time.Duration) admission {
	return admission{
		byPrefix: ratelimit.NewKeyed[string](burst, every, maxAdmitKeys),
		bySource: ratelimit.NewKeyed[sourceKey](burst, every, maxAdmitKeys),
	}
}

// allow reports whether a sighting of a new machine may enter the ledger.
// A sighting the source's limit refuses takes nothing from its prefix's.
func (a admission) allow(s *Sighting) bool {
	src := sourceKey{iface: s.Iface, relay: s.Source}
	if ok, _ := a.bySource.Allow(src, s.At); !ok {
		return false
	}
	ok, _ := a.byPrefix.Allow(s.MAC[:len("aa:bb:cc")], s.At)
	return ok
}

// evictLocked makes room for a new machine: the one-shot machine seen
// longest ago goes first; only when every machine was seen repeatedly does
// the one seen longest ago go.
func (l *Ledger) evictLocked() {
	var oldest, oldestOneShot *machine
	older := func(a, b *machine) bool {
		return b == nil || a.last.Before(b.last) || (a.last.Equal(b.last) && a.mac > b.mac)
	}
	for _, m := range l.machines {
		if older(m, oldest) {
			oldest = m
		}
		if !m.repeat && older(m, oldestOneShot) {
			oldestOneShot = m
		}
	}
	victim, kind := oldestOneShot, "one-shot"
	if victim == nil {
		victim, kind = oldest, "repeat"
	}
	if victim != nil {
		delete(l.machines, victim.mac)
		l.evicted.WithLabelValues(kind).Inc()
	}
}
