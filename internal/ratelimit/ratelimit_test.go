package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

type step struct {
	key string
	sec float64
}

type result struct {
	OK         bool
	Suppressed uint64
}

func run(k *Keyed[string], steps []step) []result {
	var out []result
	for _, s := range steps {
		ok, n := k.Allow(s.key, at(s.sec))
		out = append(out, result{ok, n})
	}
	return out
}

func TestKeyedBurstRefillAndSuppressedCount(t *testing.T) {
	k := NewKeyed[string](2, time.Second, 8)
	got := run(k, []step{
		{"a", 0}, {"a", 0}, {"a", 0}, {"a", 0.5}, // burst of 2, then two refused
		{"a", 1},               // one token back after a second; it says two were refused
		{"a", 1.1}, {"b", 1.1}, // a is empty again; b has its own bucket
		{"a", 10}, {"a", 10}, {"a", 10}, // refills to the burst, not beyond
		{"a", 5}, // clock steps back: nothing refilled
	})
	want := []result{
		{true, 0}, {true, 0}, {false, 0}, {false, 0},
		{true, 2},
		{false, 0}, {true, 0},
		{true, 1}, {true, 0}, {false, 0},
		{false, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Allow (-want +got):\n%s", diff)
	}
}

// TestKeyedChurnDoesNotReset: a peer that makes up new keys faster than
// buckets refill cannot push the bucket of a key it is limited by out of
// memory, and its new keys share one overflow bucket.
func TestKeyedChurnDoesNotReset(t *testing.T) {
	k := NewKeyed[string](1, time.Minute, 4)
	if ok, _ := k.Allow("victim", at(0)); !ok {
		t.Fatal("first call refused")
	}
	allowed := 0
	for i := range 1000 {
		if ok, _ := k.Allow(fmt.Sprintf("churn-%d", i), at(1)); ok {
			allowed++
		}
	}
	if allowed != 3+1 { // three free slots, then the overflow bucket's one token
		t.Errorf("%d of 1000 new keys allowed, want 4", allowed)
	}
	if ok, _ := k.Allow("victim", at(2)); ok {
		t.Error("the limited key was forgotten: its bucket is full again")
	}
	if n := k.Len(); n != 4 {
		t.Errorf("remembers %d keys, want 4", n)
	}
	// Once buckets have refilled, the sweep makes room for new keys.
	if ok, _ := k.Allow("late", at(200)); !ok {
		t.Error("a new key after every bucket refilled was refused")
	}
}

func TestKeyedAllocatesOnlyForNewKeys(t *testing.T) {
	k := NewKeyed[string](1000, time.Millisecond, 8)
	k.Allow("a", t0)
	if n := testing.AllocsPerRun(100, func() { k.Allow("a", t0) }); n != 0 {
		t.Errorf("Allow of a known key: %v allocations", n)
	}
}

// Drain reports the refusals a key still owes a log line once the key has
// a token again (or at once with force), and then counts from zero.
func TestDrain(t *testing.T) {
	k := NewKeyed[string](2, time.Second, 8)
	for range 5 {
		k.Allow("busy", at(0))
	}
	k.Allow("quiet", at(0))
	if got := k.Drain(at(0.5), false); len(got) != 0 {
		t.Fatalf("Drain before a token came back = %v, want nothing", got)
	}
	if diff := cmp.Diff(map[string]uint64{"busy": 3}, k.Drain(at(1), false)); diff != "" {
		t.Fatalf("Drain (-want +got):\n%s", diff)
	}
	if got := k.Drain(at(5), false); len(got) != 0 {
		t.Fatalf("a second Drain = %v, want nothing", got)
	}
	for range 4 {
		k.Allow("busy", at(5))
	}
	if diff := cmp.Diff(map[string]uint64{"busy": 2}, k.Drain(at(5), true)); diff != "" {
		t.Fatalf("Drain with force (-want +got):\n%s", diff)
	}
	if ok, n := k.Allow("busy", at(5)); ok || n != 0 {
		t.Fatalf("Allow after a forced drain took the last token: ok=%v n=%d", ok, n)
	}
}

// A call Allow allowed and a later limit refused gives its token back and
// is counted with the ones held back before it; a key beyond the bound
// gives it back to the overflow bucket.
func TestKeyedUnspend(t *testing.T) {
	k := NewKeyed[string](2, time.Second, 1)
	k.Allow("a", at(0))
	k.Allow("a", at(0))
	if ok, _ := k.Allow("a", at(0)); ok {
		t.Fatal("a third call within the burst of 2 was allowed")
	}
	ok, held := k.Allow("a", at(1)) // one token back; one call held before
	if !ok || held != 1 {
		t.Fatalf("after a second: %v, held %d; want allowed, 1", ok, held)
	}
	k.Unspend("a", held)
	ok, held = k.Allow("a", at(1))
	if !ok || held != 2 {
		t.Errorf("after Unspend: %v, held %d; want allowed (the token back), 2 (the refused one and the unspent one)", ok, held)
	}
	// "b" is beyond maxKeys: its calls go to the overflow bucket.
	k.Allow("b", at(1))
	k.Allow("b", at(1))
	if ok, _ := k.Allow("b", at(1)); ok {
		t.Fatal("the overflow bucket allowed a third call within its burst")
	}
	k.Unspend("b", 0)
	if ok, held := k.Allow("b", at(1)); !ok || held != 2 {
		t.Errorf("overflow after Unspend: %v, held %d; want allowed, 2", ok, held)
	}
}
