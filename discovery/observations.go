package discovery

import (
	"net/netip"
	"sync"
	"time"
)

// Defaults of ObservationsConfig.
const (
	DefaultObservationsMax    = 16384
	DefaultObservationsMaxAge = 10 * time.Minute
)

// ObservationsConfig configures Observations.
type ObservationsConfig struct {
	// Max bounds the MACs remembered (DefaultObservationsMax if zero);
	// the oldest half is forgotten at once when it is reached.
	Max int
	// MaxAge is how long an observation counts (DefaultObservationsMaxAge
	// if zero): longer than a boot takes from its DHCP request to the
	// script request.
	MaxAge time.Duration
}

// Observation is what the latest DHCP request from a MAC said.
type Observation struct {
	// ProductUUID is option 97's UUID, normalised; "" when it had none.
	ProductUUID string
	// Arch is the client arch name; "" when unknown.
	Arch string
	// Relay is the relay it came through; the zero Addr when direct.
	Relay netip.Addr
	// At is when it arrived.
	At time.Time
}

// Observations remembers, for a bounded number of machines that have an
// entry, what their latest DHCP request said, so that a signed assertion
// can carry what this appliance saw on the provisioning path rather than
// what an HTTP query claims. The DHCP proxy feeds it (Observe is a map
// update under a mutex, allocation-free for a MAC it holds); the script
// renderer reads it (LastSeen). It lives in memory only. Safe for
// concurrent use.
type Observations struct {
	cfg ObservationsConfig

	mu        sync.Mutex
	cur, prev map[string]observed // two generations of at most Max/2 each
}

// observed is what the store keeps of a MAC: its latest request, the
// latest UUID any request carried and when, and when two requests last
// carried different UUIDs within MaxAge of each other.
type observed struct {
	Observation
	uuid             string
	uuidAt, disputed time.Time
}

// NewObservations returns an empty store.
func NewObservations(cfg ObservationsConfig) *Observations {
	if cfg.Max <= 1 {
		cfg.Max = DefaultObservationsMax
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultObservationsMaxAge
	}
	return &Observations{cfg: cfg, cur: make(map[string]observed)}
}

// Observe notes one DHCP request of a machine with an entry. A sighting
// without a valid MAC, or with values too long to be what they claim, is
// ignored. A UUID other than the one a request for the MAC carried within
// MaxAge before disputes both: anyone can send a request with any MAC.
func (o *Observations) Observe(s Sighting) {
	if !isMAC(s.MAC) || len(s.ProductUUID) > uuidLen || len(s.Arch) > maxArchLen {
		return
	}
	ob := Observation{ProductUUID: s.ProductUUID, Arch: s.Arch, At: s.At}
	if ip4 := s.Relay.To4(); ip4 != nil && !ip4.IsUnspecified() {
		ob.Relay = netip.AddrFrom4([4]byte(ip4))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old, ok := o.cur[s.MAC]
	if !ok {
		old, ok = o.prev[s.MAC]
		if len(o.cur) >= o.cfg.Max/2 {
			o.prev, o.cur = o.cur, make(map[string]observed, o.cfg.Max/2)
		}
	}
	next := observed{Observation: ob, uuid: old.uuid, uuidAt: old.uuidAt, disputed: old.disputed}
	if u := s.ProductUUID; u != "" {
		if ok && old.uuid != "" && old.uuid != u && s.At.Sub(old.uuidAt) <= o.cfg.MaxAge && s.At.After(next.disputed) {
			next.disputed = s.At
		}
		next.uuid, next.uuidAt = u, s.At
	}
	o.cur[s.MAC] = next
}

// LastSeen returns the latest observation of mac (lowercase colon form) if
// it is at most MaxAge old at now. Its ProductUUID is empty while the
// MAC's UUID is disputed: until MaxAge after two requests last carried
// different ones.
func (o *Observations) LastSeen(mac string, now time.Time) (Observation, bool) {
	o.mu.Lock()
	ob, ok := o.cur[mac]
	if !ok {
		ob, ok = o.prev[mac]
	}
	o.mu.Unlock()
	if !ok || now.Sub(ob.At) > o.cfg.MaxAge || ob.At.After(now.Add(o.cfg.MaxAge)) {
		return Observation{}, false
	}
	if !ob.disputed.IsZero() && now.Sub(ob.disputed) <= o.cfg.MaxAge {
		ob.ProductUUID = ""
	}
	return ob.Observation, true
}

// Len returns how many MACs the store remembers.
func (o *Observations) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.cur)
	for mac := range o.prev {
		if _, dup := o.cur[mac]; !dup {
			n++
		}
	}
	return n
}
