package discovery

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestObservationsLastSeen(t *testing.T) {
	o := NewObservations(ObservationsConfig{MaxAge: time.Minute})
	o.Observe(Sighting{MAC: macA, ProductUUID: uuid1, Arch: "bios", Relay: net.IPv4(10, 1, 0, 1), At: at(0)})
	o.Observe(Sighting{MAC: "bogus", ProductUUID: uuid1, At: at(0)})
	got, ok := o.LastSeen(macA, at(time.Minute))
	want := Observation{ProductUUID: uuid1, Arch: "bios", Relay: netip.MustParseAddr("10.1.0.1"), At: at(0)}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); !ok || diff != "" {
		t.Fatalf("LastSeen = %v (-want +got):\n%s", ok, diff)
	}
	if _, ok := o.LastSeen(macA, at(time.Minute+time.Second)); ok {
		t.Error("an observation older than MaxAge counted")
	}
	if _, ok := o.LastSeen(macB, at(0)); ok {
		t.Error("LastSeen of a MAC never observed")
	}
	// The latest request wins, also when it carried no UUID.
	o.Observe(Sighting{MAC: macA, At: at(2 * time.Minute)})
	if got, _ := o.LastSeen(macA, at(2*time.Minute)); got.ProductUUID != "" {
		t.Errorf("after a request without option 97: %+v", got)
	}
}

// TestObservationsBounded: the store holds at most Max MACs, forgetting the
// oldest half at once; a MAC it holds costs no allocation.
func TestObservationsBounded(t *testing.T) {
	o := NewObservations(ObservationsConfig{Max: 64})
	for i := range 1000 {
		o.Observe(Sighting{MAC: fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256), At: at(0)})
		if n := o.Len(); n > 64 {
			t.Fatalf("holds %d MACs after %d, want at most 64", n, i+1)
		}
	}
	if _, ok := o.LastSeen("52:54:00:00:03:e7", at(0)); !ok {
		t.Error("the latest MAC was forgotten")
	}
	if _, ok := o.LastSeen("52:54:00:00:00:00", at(0)); ok {
		t.Error("the first of 1000 MACs is still held")
	}
	s := Sighting{MAC: "52:54:00:00:03:e7", ProductUUID: uuid1, At: at(0)}
	if n := testing.AllocsPerRun(100, func() { o.Observe(s) }); n != 0 {
		t.Errorf("Observe of a held MAC: %v allocations", n)
	}
}

// TestObservationsDisputedUUID: when DHCP requests for one MAC carry two
// different UUIDs within MaxAge (the machine and someone forging its MAC),
// neither is vouched for until MaxAge has passed since they last
// disagreed; a request without option 97 settles nothing.
func TestObservationsDisputedUUID(t *testing.T) {
	o := NewObservations(ObservationsConfig{MaxAge: time.Minute})
	steps := []struct {
		observe string // UUID of a request at the step's time; "-" for none
		at      time.Duration
		want    string // LastSeen's UUID then
	}{
		{uuid1, 0, uuid1},
		{uuid1, 10 * time.Second, uuid1},
		{uuid2, 20 * time.Second, ""}, // forged after the real one
		{uuid1, 30 * time.Second, ""}, // the real one again: still disputed
		{"-", 40 * time.Second, ""},
		{uuid1, 85 * time.Second, ""},    // 55 s after the last disagreement (at 30 s)
		{uuid1, 91 * time.Second, uuid1}, // more than a minute after it
	}
	for _, s := range steps {
		u := s.observe
		if u == "-" {
			u = ""
		}
		o.Observe(Sighting{MAC: macA, ProductUUID: u, At: at(s.at)})
		got, ok := o.LastSeen(macA, at(s.at))
		if !ok || got.ProductUUID != s.want {
			t.Errorf("after %q at %s: LastSeen = %q, %v; want %q", s.observe, s.at, got.ProductUUID, ok, s.want)
		}
	}
	// A forged UUID seen before the real one is no better.
	o2 := NewObservations(ObservationsConfig{MaxAge: time.Minute})
	o2.Observe(Sighting{MAC: macB, ProductUUID: uuid2, At: at(0)})
	o2.Observe(Sighting{MAC: macB, ProductUUID: uuid1, At: at(5 * time.Second)})
	if got, _ := o2.LastSeen(macB, at(5*time.Second)); got.ProductUUID != "" {
		t.Errorf("forged before the real one: LastSeen UUID %q, want none", got.ProductUUID)
	}
	// Two UUIDs more than MaxAge apart are a machine that changed (a board
	// swap), not a dispute.
	o2.Observe(Sighting{MAC: macA, ProductUUID: uuid2, At: at(0)})
	o2.Observe(Sighting{MAC: macA, ProductUUID: uuid1, At: at(2 * time.Minute)})
	if got, _ := o2.LastSeen(macA, at(2*time.Minute)); got.ProductUUID != uuid1 {
		t.Errorf("UUIDs two minutes apart: LastSeen UUID %q, want %q", got.ProductUUID, uuid1)
	}
}
