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
