package discovery

import (
	"fmt"
	"github.com/siteboot/siteboot/internal/metrictest"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestLedgerFloodKeepsRepeatMachines is the finding: 300 made-up MACs
// carrying one chosen UUID evicted a real machine from the full ledger and
// left 256 forged entries. Now the flood enters at the new-machine rate,
// and what does enter evicts only its own kind.
func TestLedgerFloodKeepsRepeatMachines(t *testing.T) {
	const chosen = "00000000-0000-0000-0000-00000000beef"
	clk := newClock()
	reg := prometheus.NewPedanticRegistry()
	l, err := OpenLedger(LedgerConfig{Now: clk.Now, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	real := Sighting{MAC: macA, ProductUUID: uuid1, Arch: "x86_64-efi", Iface: "eth0"}
	real.At = at(0)
	l.Record(real)
	real.At = at(4 * time.Second) // firmware retries
	l.Record(real)
	for i := range 300 {
		l.Record(Sighting{MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), ProductUUID: chosen, Iface: "eth0", At: at(5 * time.Second)})
	}
	forged := 0
	for _, m := range l.List() {
		if m.GetProductUuid() == chosen {
			forged++
		}
	}
	if forged != DefaultNewBurst {
		t.Errorf("%d forged machines entered the ledger at once, want the burst of %d", forged, DefaultNewBurst)
	}
	if !holds(l, macA, uuid1) {
		t.Fatal("the real machine is gone")
	}
	got := metrictest.Values(t, reg)
	if got["siteboot_discovery_new_machines_refused_total"] != 300-DefaultNewBurst {
		t.Errorf("refused = %v, want %d", got["siteboot_discovery_new_machines_refused_total"], 300-DefaultNewBurst)
	}
}

// TestLedgerEvictsOneShotsFirst: with no rate limit at all, a full ledger
// makes room by evicting one-shot machines; a machine seen repeatedly
// survives any number of them.
func TestLedgerEvictsOneShotsFirst(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now, Max: 4, NewBurst: 1 << 20})
	l.Record(Sighting{MAC: macA, At: at(0)})
	l.Record(Sighting{MAC: macA, At: at(RepeatGap)})
	l.Record(Sighting{MAC: macB, At: at(0)})
	l.Record(Sighting{MAC: macB, At: at(time.Second)}) // twice, but within RepeatGap: still one-shot
	for i := range 1000 {
		l.Record(Sighting{MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), At: at(time.Minute + time.Duration(i)*time.Millisecond)})
	}
	if !holds(l, macA, "") || holds(l, macB, "") || l.Count() != 4 {
		t.Fatalf("ledger after the flood: %v", l.List())
	}
	// Full of repeat machines, the one seen longest ago makes room.
	l2, _ := OpenLedger(LedgerConfig{Now: clk.Now, Max: 2, NewBurst: 1 << 20})
	for i, mac := range []string{macA, macB} {
		l2.Record(Sighting{MAC: mac, At: at(time.Duration(i) * time.Second)})
		l2.Record(Sighting{MAC: mac, At: at(time.Duration(i)*time.Second + RepeatGap)})
	}
	l2.Record(Sighting{MAC: macC, At: at(time.Minute)})
	if holds(l2, macA, "") || !holds(l2, macB, "") || !holds(l2, macC, "") {
		t.Fatalf("full of repeat machines: %v", l2.List())
	}
}

func holds(l *Ledger, mac, uuid string) bool {
	for _, m := range l.List() {
		if m.GetMac() == mac && (uuid == "" || m.GetProductUuid() == uuid) {
			return true
		}
	}
	return false
}

// TestLedgerNewMachineLimits: new machines enter at NewBurst, then one per
// NewEvery, per source (the arrival interface, or a configured relay) and
// per MAC prefix; machines already held are never limited.
func TestLedgerNewMachineLimits(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now, NewBurst: 2, NewEvery: 10 * time.Second})
	relay := netip.MustParseAddr("10.1.0.1")
	steps := []struct {
		name string
		s    Sighting
		want bool // entered (or was already held)
	}{
		{"eth0 first", Sighting{MAC: "52:54:00:00:00:01", Iface: "eth0"}, true},
		{"eth0 second", Sighting{MAC: "52:54:01:00:00:02", Iface: "eth0"}, true},
		{"eth0 over its burst", Sighting{MAC: "52:54:02:00:00:03", Iface: "eth0"}, false},
		{"a held machine is not limited", Sighting{MAC: "52:54:00:00:00:01", Iface: "eth0"}, true},
		{"another interface has its own limit", Sighting{MAC: "52:54:00:00:00:04", Iface: "eth1"}, true},
		{"its prefix 52:54:00 is now over its burst", Sighting{MAC: "52:54:00:00:00:05", Iface: "eth1"}, false},
		{"a configured relay has its own limit", Sighting{MAC: "52:54:03:00:00:06", Iface: "eth0", Source: relay}, true},
	}
	var got, want []string
	for _, st := range steps {
		st.s.At = at(0)
		l.Record(st.s)
		want = append(want, fmt.Sprintf("%s: %v", st.name, st.want))
		got = append(got, fmt.Sprintf("%s: %v", st.name, holds(l, st.s.MAC, "")))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	l.Record(Sighting{MAC: "52:54:02:00:00:03", Iface: "eth0", At: at(10 * time.Second)})
	if !holds(l, "52:54:02:00:00:03", "") {
		t.Error("a new machine was refused after the source refilled")
	}
}

// TestLedgerTouch: an HTTP request moves last_seen of a machine DHCP put in
// the ledger, and does nothing else.
func TestLedgerTouch(t *testing.T) {
	clk := newClock()
	l, _ := OpenLedger(LedgerConfig{Now: clk.Now})
	l.Record(Sighting{MAC: macA, ProductUUID: uuid1, Arch: "bios", At: at(0)})
	if !l.Touch(macA, at(time.Minute)) {
		t.Error("Touch of a held machine = false")
	}
	l.Touch(macA, at(time.Second)) // older: no change
	if l.Touch(macB, at(time.Minute)) {
		t.Error("Touch of an unknown machine = true")
	}
	want := []*agentv1.DiscoveredMachine{dm(macA, uuid1, "bios", "", 0, time.Minute, 1)}
	if diff := cmp.Diff(want, l.List(), protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}
