package discovery

import (
	"fmt"
	"github.com/siteboot/siteboot/internal/metrictest"
	"go.uber.org/goleak"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func dm(mac, uuid, arch, relay string, first, last time.Duration, count uint32) *agentv1.DiscoveredMachine {
	return &agentv1.DiscoveredMachine{
		Mac: mac, ProductUuid: uuid, Arch: arch, Relay: relay, Count: count,
		FirstSeen: timestamppb.New(at(first)), LastSeen: timestamppb.New(at(last)),
	}
}

const (
	macA  = "52:54:00:00:00:0a"
	macB  = "52:54:00:00:00:0b"
	macC  = "52:54:00:00:00:0c"
	uuid1 = "8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2b"
	uuid2 = "00000000-0000-0000-0000-000000000002"
)

func TestLedgerRecord(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		sightings []Sighting
		advance   time.Duration // clock advance before List
		want      []*agentv1.DiscoveredMachine
	}{
		{
			name:      "one sighting",
			sightings: []Sighting{{MAC: macA, ProductUUID: uuid1, Arch: "bios", At: at(0)}},
			want:      []*agentv1.DiscoveredMachine{dm(macA, uuid1, "bios", "", 0, 0, 1)},
		},
		{
			name: "repeat keeps first seen, counts, takes latest non-empty values",
			sightings: []Sighting{
				{MAC: macA, ProductUUID: uuid1, Arch: "bios", At: at(0)},
				{MAC: macA, Arch: "x86_64-efi", Relay: net.IPv4(10, 1, 2, 1), At: at(time.Minute)},
				{MAC: macA, ProductUUID: uuid2, At: at(2 * time.Minute)},
			},
			want: []*agentv1.DiscoveredMachine{dm(macA, uuid2, "x86_64-efi", "", 0, 2*time.Minute, 3)},
		},
		{
			name:      "relay is the giaddr",
			sightings: []Sighting{{MAC: macB, Relay: net.IPv4(10, 9, 8, 1), At: at(0)}},
			want:      []*agentv1.DiscoveredMachine{dm(macB, "", "", "10.9.8.1", 0, 0, 1)},
		},
		{
			name:      "unspecified relay is direct",
			sightings: []Sighting{{MAC: macB, Relay: net.IPv4zero, At: at(0)}},
			want:      []*agentv1.DiscoveredMachine{dm(macB, "", "", "", 0, 0, 1)},
		},
		{
			name: "sorted by last seen, newest first, then mac",
			sightings: []Sighting{
				{MAC: macC, At: at(time.Second)},
				{MAC: macB, At: at(2 * time.Second)},
				{MAC: macA, At: at(time.Second)},
			},
			want: []*agentv1.DiscoveredMachine{
				dm(macB, "", "", "", 2*time.Second, 2*time.Second, 1),
				dm(macA, "", "", "", time.Second, time.Second, 1),
				dm(macC, "", "", "", time.Second, time.Second, 1),
			},
		},
		{
			name: "full ledger evicts the one seen longest ago",
			max:  2,
			sightings: []Sighting{
				{MAC: macA, At: at(0)},
				{MAC: macB, At: at(time.Second)},
				{MAC: macA, At: at(2 * time.Second)},
				{MAC: macC, At: at(3 * time.Second)},
			},
			want: []*agentv1.DiscoveredMachine{
				dm(macC, "", "", "", 3*time.Second, 3*time.Second, 1),
				dm(macA, "", "", "", 0, 2*time.Second, 2),
			},
		},
		{
			name: "forgotten 24 h after last seen",
			sightings: []Sighting{
				{MAC: macA, At: at(0)},
				{MAC: macB, At: at(time.Hour)},
			},
			advance: 24*time.Hour + 30*time.Minute,
			want:    []*agentv1.DiscoveredMachine{dm(macB, "", "", "", time.Hour, time.Hour, 1)},
		},
		{
			name: "bad sightings are ignored",
			sightings: []Sighting{
				{MAC: "", At: at(0)},
				{MAC: "52:54:00:00:00:0a:ff", At: at(0)},
				{MAC: "52:54:00:00:00:0A", At: at(0)},
				{MAC: "52-54-00-00-00-0a", At: at(0)},
				{MAC: macA, ProductUUID: "x" + uuid1, Arch: string(make([]byte, 33)), At: at(0)},
			},
			want: []*agentv1.DiscoveredMachine{dm(macA, "", "", "", 0, 0, 1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			l, err := OpenLedger(LedgerConfig{Max: tt.max, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.sightings {
				l.Record(s)
			}
			clk.Add(tt.advance)
			if diff := cmp.Diff(tt.want, l.List(), protocmp.Transform()); diff != "" {
				t.Fatalf("List (-want +got):\n%s", diff)
			}
			if got := l.Count(); got != len(tt.want) {
				t.Fatalf("Count = %d, want %d", got, len(tt.want))
			}
		})
	}
}

func TestLedgerZeroAtUsesClock(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now})
	l.Record(Sighting{MAC: macA})
	want := []*agentv1.DiscoveredMachine{dm(macA, "", "", "", 0, 0, 1)}
	if diff := cmp.Diff(want, l.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}
}

func TestLedgerForget(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now})
	l.Record(Sighting{MAC: macA, At: clk.Now()})
	l.Record(Sighting{MAC: macB, At: clk.Now()})
	if !l.Forget(macA) {
		t.Fatal("Forget(known) = false")
	}
	if l.Forget(macA) {
		t.Fatal("second Forget = true")
	}
	if l.Forget(macC) {
		t.Fatal("Forget(unknown) = true")
	}
	want := []*agentv1.DiscoveredMachine{dm(macB, "", "", "", 0, 0, 1)}
	if diff := cmp.Diff(want, l.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}
}

// TestLedgerBoundUnderStorm: with the new-machine limit out of the way, a
// storm of one-shot MACs keeps the ledger at its bound, the most recently
// seen surviving.
func TestLedgerBoundUnderStorm(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now, NewBurst: 1 << 20})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				l.Record(Sighting{MAC: fmt.Sprintf("52:54:%02x:00:%02x:%02x", g, i>>8, i&0xff), At: at(time.Duration(i) * time.Millisecond)})
			}
		})
	}
	wg.Wait()
	if got := l.Count(); got != DefaultMax {
		t.Fatalf("Count = %d after 4000 distinct MACs, want the bound %d", got, DefaultMax)
	}
	for _, m := range l.List() {
		// The survivors are the most recently seen: i >= 500-32 in each of 8 streams.
		if m.GetLastSeen().AsTime().Before(at(468 * time.Millisecond)) {
			t.Fatalf("an old machine survived eviction: %v", m)
		}
	}
}

func TestLedgerMetrics(t *testing.T) {
	clk := newClock()
	reg := prometheus.NewPedanticRegistry()
	l, err := OpenLedger(LedgerConfig{Now: clk.Now, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Sighting{MAC: macA, At: clk.Now()})
	l.Record(Sighting{MAC: macA, At: clk.Now()})
	l.Record(Sighting{MAC: macB, At: clk.Now()})
	l.Record(Sighting{MAC: "bogus", At: clk.Now()})
	want := map[string]float64{
		"siteboot_discovery_machines":                           2,
		"siteboot_discovery_sightings_total":                    3,
		"siteboot_discovery_new_machines_refused_total":         0,
		`siteboot_discovery_evictions_total{kind="one-shot"}`:   0,
		`siteboot_discovery_evictions_total{kind="repeat"}`:     0,
		`siteboot_discovery_ledger_saves_total{result="error"}`: 0,
		`siteboot_discovery_ledger_saves_total{result="ok"}`:    0,
	}
	if diff := cmp.Diff(want, metrictest.Values(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if _, err := OpenLedger(LedgerConfig{Metrics: reg}); err == nil {
		t.Error("registering twice in one registry succeeded")
	}
}

// BenchmarkRecord: repeat sightings within the bound, and a storm of more
// distinct MACs than the bound (every sighting evicts).
func BenchmarkRecord(b *testing.B) {
	for _, n := range []int{DefaultMax, 4 * DefaultMax} {
		b.Run(fmt.Sprintf("macs=%d", n), func(b *testing.B) {
			l, _ := OpenLedger(LedgerConfig{Path: b.TempDir() + "/ledger", NewBurst: 1 << 30})
			macs := make([]string, n)
			for i := range macs {
				macs[i] = fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8, i&0xff)
			}
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Record(Sighting{MAC: macs[i%n], Arch: "bios", At: now.Add(time.Duration(i))})
				i++
			}
		})
	}
}

// TestMain fails the package's tests when one of them leaks a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
