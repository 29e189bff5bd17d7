package discovery

import (
	"bytes"
	"context"
	"github.com/siteboot/siteboot/internal/metrictest"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestLedgerPersistsAcrossRestart(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "data", "discovered.ledger")
	l, err := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Sighting{MAC: macA, ProductUUID: uuid1, Arch: "x86_64-efi", Relay: net.IPv4(10, 0, 9, 1), At: clk.Now()})
	l.Record(Sighting{MAC: macB, Arch: "bios", At: clk.Now().Add(time.Second)})
	l.Record(Sighting{MAC: macA, At: clk.Now().Add(2 * time.Second)})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("Record wrote the file (stat err %v); it must do no I/O", err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	want := l.List()

	l2, err := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, l2.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("reloaded ledger (-saved +loaded):\n%s", diff)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("ledger file mode %04o, want 0600", fi.Mode().Perm())
	}
}

func TestLedgerFlushOnlyWhenChanged(t *testing.T) {
	clk := newClock()
	reg := prometheus.NewRegistry()
	path := filepath.Join(t.TempDir(), "discovered.ledger")
	l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now, Metrics: reg})
	steps := []struct {
		name   string
		do     func()
		wantOK float64
	}{
		{"empty ledger: nothing to save", func() {}, 0},
		{"first sighting", func() { l.Record(Sighting{MAC: macA, At: clk.Now()}) }, 1},
		{"unchanged", func() {}, 1},
		{"sighting again", func() { l.Record(Sighting{MAC: macA, At: clk.Now()}) }, 2},
		{"forget unknown changes nothing", func() { l.Forget(macC) }, 2},
		{"forget known", func() { l.Forget(macA) }, 3},
	}
	for _, s := range steps {
		s.do()
		if err := l.Flush(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := metrictest.Values(t, reg)[`siteboot_discovery_ledger_saves_total{result="ok"}`]; got != s.wantOK {
			t.Fatalf("%s: saves = %v, want %v", s.name, got, s.wantOK)
		}
	}
}

func TestLedgerLoadDropsForgottenAndBoundsMax(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "discovered.ledger")
	l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	l.Record(Sighting{MAC: macA, At: clk.Now()})
	l.Record(Sighting{MAC: macB, At: clk.Now().Add(20 * time.Hour)})
	l.Record(Sighting{MAC: macC, At: clk.Now().Add(21 * time.Hour)})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	clk.Add(25 * time.Hour) // macA is past the 24 h window
	l2, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now, Max: 1})
	want := []*agentv1.DiscoveredMachine{dm(macC, "", "", "", 21*time.Hour, 21*time.Hour, 1)}
	if diff := cmp.Diff(want, l2.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("loaded (-want +got):\n%s", diff)
	}
	// The trimmed ledger is dirty: the next flush rewrites the file.
	if err := l2.Flush(); err != nil {
		t.Fatal(err)
	}
	l3, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	if diff := cmp.Diff(want, l3.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("after rewrite (-want +got):\n%s", diff)
	}
}

func TestLedgerCorruptFileSetAside(t *testing.T) {
	clk := newClock()
	good := func(t *testing.T) []byte {
		path := filepath.Join(t.TempDir(), "good")
		l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
		l.Record(Sighting{MAC: macA, ProductUUID: uuid1, At: clk.Now()})
		l.Record(Sighting{MAC: macB, At: clk.Now()})
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		return data
	}(t)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x20
		return b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("this is not a ledger at all, not even close")},
		{"truncated mid record", good[:len(good)/2]},
		{"last byte cut", good[:len(good)-1]},
		{"flipped byte in a record", flip(30)},
		{"flipped magic", flip(0)},
		{"trailing bytes", append(bytes.Clone(good), 0, 0, 0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "discovered.ledger")
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			l, err := OpenLedger(LedgerConfig{Path: path, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("OpenLedger on a corrupt file: %v", err)
			}
			if n := l.Count(); n != 0 {
				t.Fatalf("Count = %d, want an empty ledger", n)
			}
			aside, err := os.ReadFile(path + ".corrupt")
			if err != nil || !bytes.Equal(aside, tt.data) {
				t.Fatalf("bad file not kept aside as .corrupt (err %v)", err)
			}
			if !bytes.Contains(logs.Bytes(), []byte("corrupt")) {
				t.Fatalf("no log line about it; logs:\n%s", logs.String())
			}
			// A new ledger is written where the bad one was.
			l.Record(Sighting{MAC: macC, At: clk.Now()})
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			l2, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
			if n := l2.Count(); n != 1 {
				t.Fatalf("after rewrite Count = %d, want 1", n)
			}
		})
	}
	// The untouched good file still loads, so the cases above test damage.
	path := filepath.Join(t.TempDir(), "discovered.ledger")
	os.WriteFile(path, good, 0o600)
	l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	if n := l.Count(); n != 2 {
		t.Fatalf("good file: Count = %d, want 2", n)
	}
}

func TestLedgerRunSavesPeriodicallyAndOnShutdown(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "discovered.ledger")
	l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now, Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	l.Record(Sighting{MAC: macA, At: clk.Now()})
	deadline := time.Now().Add(5 * time.Second)
	for countOnDisk(t, path) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the periodic save never happened")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.Record(Sighting{MAC: macB, At: clk.Now()})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := countOnDisk(t, path); n != 2 {
		t.Fatalf("after shutdown the file holds %d machines, want 2", n)
	}
}

func TestLedgerRunReportsFailedFinalSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "discovered.ledger")
	l, _ := OpenLedger(LedgerConfig{Path: path, Interval: time.Hour})
	l.Record(Sighting{MAC: macA})
	if err := os.Mkdir(path, 0o700); err != nil { // a directory where the file goes
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx); err == nil {
		t.Fatal("Run returned nil although the final save could not replace a non-empty directory")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func countOnDisk(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	ms, err := decodeLedger(data)
	if err != nil {
		t.Fatalf("file on disk does not decode: %v", err)
	}
	return len(ms)
}

// TestLedgerLoadsFileOfEarlierVersions: testdata/ledger-v1.bin was written
// by the ledger before new-machine limits and one-shot eviction existed
// (Record of four sightings, then Flush). It loads as it was, and the same
// machines encode to the same bytes, so the format did not change.
func TestLedgerLoadsFileOfEarlierVersions(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "ledger-v1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "discovered.pb")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0.Add(time.Hour) }
	l, err := OpenLedger(LedgerConfig{Path: path, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	want := []*agentv1.DiscoveredMachine{
		dm(macC, uuid2, "arm64-efi-http", "", 2*time.Minute, 2*time.Minute, 1),
		dm(macB, "", "", "", time.Minute, time.Minute, 1),
		dm(macA, uuid1, "x86_64-efi", "10.1.0.1", 0, 30*time.Second, 2),
	}
	if diff := cmp.Diff(want, l.List(), protocmp.Transform()); diff != "" {
		t.Fatalf("loaded ledger (-want +got):\n%s", diff)
	}
	l.mu.Lock()
	repeat := map[string]bool{}
	ms := make([]machine, 0, len(l.machines))
	for mac, m := range l.machines {
		repeat[mac] = m.repeat
		ms = append(ms, *m)
	}
	l.mu.Unlock()
	if diff := cmp.Diff(map[string]bool{macA: true, macB: false, macC: false}, repeat); diff != "" {
		t.Errorf("seen repeatedly (-want +got):\n%s", diff)
	}
	sortMachines(ms)
	again, err := encodeLedger(ms)
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("re-encoded ledger differs from the file (err %v)", err)
	}
}

// TestLedgerStartRemovesLeftoversOfACrash: a crash while a save was being
// written leaves its temporary file next to the ledger; the next start
// removes it (so crashes cannot fill the data dir) and keeps the ledger the
// last complete save wrote, and leaves other files alone.
func TestLedgerStartRemovesLeftoversOfACrash(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "discovered.pb")
	l, _ := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	l.Record(Sighting{MAC: macA, ProductUUID: uuid1, Arch: "bios", At: clk.Now()})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, ".discovered.pb-123456.tmp") // as atomicfile names it
	other := filepath.Join(dir, ".node.key-1.tmp")
	for _, p := range []string{leftover, other} {
		if err := os.WriteFile(p, []byte("SBLEDGER half a save"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := OpenLedger(LedgerConfig{Path: path, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the crashed save's temporary file is still there (stat err %v)", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another file's temporary was touched: %v", err)
	}
	if n := l2.Count(); n != 1 {
		t.Errorf("ledger after restart holds %d machines, want 1", n)
	}
}
