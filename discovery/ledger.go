package discovery

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Defaults of LedgerConfig.
const (
	DefaultMax      = 256
	DefaultForget   = 24 * time.Hour
	DefaultInterval = 10 * time.Second
	DefaultNewBurst = 64
	DefaultNewEvery = time.Second
)

// Bounds on what a Sighting may carry; longer values are not a MAC, UUID or
// arch name and are dropped rather than stored.
const (
	macLen     = len("aa:bb:cc:dd:ee:ff")
	uuidLen    = len("00000000-0000-0000-0000-000000000000")
	maxArchLen = 32
)

// LedgerConfig configures a Ledger.
type LedgerConfig struct {
	// Path is the file the ledger persists to (in the data dir). Its
	// directory is created 0700 when missing. Empty keeps the ledger in
	// memory only.
	Path string
	// Max bounds the machines held; the one seen longest ago is evicted to
	// make room (DefaultMax if zero).
	Max int
	// Forget is how long after its last sighting a machine is dropped
	// (DefaultForget if zero).
	Forget time.Duration
	// Interval is how often Run persists a changed ledger (DefaultInterval
	// if zero).
	Interval time.Duration
	// NewBurst and NewEvery bound how fast machines the ledger does not
	// hold yet enter it, per MAC prefix (OUI) and per source (a configured
	// relay, else the arrival interface): NewBurst at once, then one per
	// NewEvery (DefaultNewBurst, DefaultNewEvery if zero). Sightings of
	// machines it holds are never limited.
	NewBurst int
	NewEvery time.Duration
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// Logger receives load and save problems (discarded if nil).
	Logger *slog.Logger
	// Metrics registers siteboot_discovery_* (nothing registered if nil).
	Metrics prometheus.Registerer
}

// Ledger is the bounded set of machines that asked the DHCP proxy for a
// boot without a live entry. Record is cheap enough for the DHCP hot path:
// a map update under a mutex, no I/O. Run persists it. Safe for
// concurrent use.
//
// Only DHCP feeds it. New machines are admitted at a bounded rate per MAC
// prefix and per source, and when it is full a one-shot machine (seen
// once, or only within RepeatGap of its first sighting) is evicted before
// any machine seen repeatedly, so a flood of made-up MACs neither grows it
// nor pushes out the machines that keep asking. HTTP requests only Touch
// what DHCP put there.
type Ledger struct {
	cfg      LedgerConfig
	log      *slog.Logger
	admit    admission
	sighting prometheus.Counter
	refused  prometheus.Counter
	evicted  *prometheus.CounterVec
	saves    *prometheus.CounterVec

	mu       sync.Mutex
	machines map[string]*machine
	gen      uint64 // bumped by every change
	savedGen uint64 // gen of the last successful save

	saveMu sync.Mutex // one save at a time
}

type machine struct {
	mac, uuid, arch, relay string
	first, last            time.Time
	count                  uint32
	repeat                 bool // seen again at least RepeatGap after first
}

// OpenLedger loads the ledger from cfg.Path. A corrupt file is set aside as
// Path+".corrupt" and the ledger starts empty; only an unreadable file or
// directory is an error.
func OpenLedger(cfg LedgerConfig) (*Ledger, error) {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.Forget <= 0 {
		cfg.Forget = DefaultForget
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.NewBurst <= 0 {
		cfg.NewBurst = DefaultNewBurst
	}
	if cfg.NewEvery <= 0 {
		cfg.NewEvery = DefaultNewEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{cfg: cfg, log: cfg.Logger, admit: newAdmission(cfg.NewBurst, cfg.NewEvery), machines: make(map[string]*machine)}
	if err := l.load(); err != nil {
		return nil, err
	}
	if err := l.registerMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	return l, nil
}

// Record notes one DHCP sighting of a machine without a live entry. A
// sighting without a MAC, or with values too long to be what they claim,
// is ignored (logged at Debug); one of a machine the ledger does not hold
// is dropped while its prefix or source is over the new-machine limit.
func (l *Ledger) Record(s Sighting) {
	if !isMAC(s.MAC) {
		l.log.Debug("discovery: sighting ignored: MAC not in lowercase colon form", "mac_len", len(s.MAC))
		return
	}
	if s.At.IsZero() {
		s.At = l.cfg.Now()
	}
	l.mu.Lock()
	m, ok := l.machines[s.MAC]
	if !ok {
		if !l.admit.allow(&s) {
			l.mu.Unlock()
			l.refused.Inc()
			return
		}
		if len(l.machines) >= l.cfg.Max {
			l.evictLocked()
		}
		m = &machine{mac: s.MAC, first: s.At}
		l.machines[s.MAC] = m
	}
	l.updateLocked(m, s)
	l.gen++
	l.mu.Unlock()
	l.sighting.Inc()
}

// Touch notes that mac (lowercase colon form) asked for something over
// HTTP at at: it moves last_seen of a machine the ledger holds and reports
// whether there was one. It never adds a machine and changes nothing DHCP
// reported (UUID, arch, relay, count): HTTP is not the provisioning path,
// and anyone who reaches it can name any MAC.
func (l *Ledger) Touch(mac string, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.machines[mac]
	if !ok {
		return false
	}
	if at.After(m.last) {
		m.last = at
		l.gen++
	}
	return true
}

// isMAC reports whether s is an EUI-48 in lowercase colon form.
func isMAC(s string) bool {
	if len(s) != macLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return false
			}
		} else if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (l *Ledger) updateLocked(m *machine, s Sighting) {
	if s.ProductUUID != "" && len(s.ProductUUID) <= uuidLen {
		m.uuid = s.ProductUUID
	}
	if s.Arch != "" && len(s.Arch) <= maxArchLen {
		m.arch = s.Arch
	}
	m.relay = ""
	if len(s.Relay) > 0 && !s.Relay.IsUnspecified() {
		m.relay = s.Relay.String()
	}
	if s.At.After(m.last) {
		m.last = s.At
	}
	if s.At.Before(m.first) {
		m.first = s.At
	}
	if m.count > 0 && s.At.Sub(m.first) >= RepeatGap {
		m.repeat = true
	}
	if m.count < math.MaxUint32 {
		m.count++
	}
}

// Forget drops mac (lowercase colon form) from the ledger, as when an
// entry is added for it, and reports whether it was there.
func (l *Ledger) Forget(mac string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.machines[mac]; !ok {
		return false
	}
	delete(l.machines, mac)
	l.gen++
	return true
}

// List returns the machines seen within Forget of now, most recently seen
// first (ties by MAC). Older machines are dropped from the ledger.
func (l *Ledger) List() []*agentv1.DiscoveredMachine {
	l.mu.Lock()
	l.pruneLocked(l.cfg.Now())
	ms := make([]machine, 0, len(l.machines))
	for _, m := range l.machines {
		ms = append(ms, *m)
	}
	l.mu.Unlock()
	sortMachines(ms)
	out := make([]*agentv1.DiscoveredMachine, len(ms))
	for i := range ms {
		out[i] = ms[i].proto()
	}
	return out
}

// Count returns how many machines List would return.
func (l *Ledger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(l.cfg.Now())
	return len(l.machines)
}

func (l *Ledger) pruneLocked(now time.Time) {
	cutoff := now.Add(-l.cfg.Forget)
	for mac, m := range l.machines {
		if !m.last.After(cutoff) {
			delete(l.machines, mac)
			l.gen++
		}
	}
}

func sortMachines(ms []machine) {
	slices.SortFunc(ms, func(a, b machine) int {
		if c := b.last.Compare(a.last); c != 0 {
			return c
		}
		return cmp.Compare(a.mac, b.mac)
	})
}

func (m *machine) proto() *agentv1.DiscoveredMachine {
	return &agentv1.DiscoveredMachine{
		Mac:         m.mac,
		ProductUuid: m.uuid,
		Arch:        m.arch,
		FirstSeen:   timestamppb.New(m.first),
		LastSeen:    timestamppb.New(m.last),
		Count:       m.count,
		Relay:       m.relay,
	}
}
