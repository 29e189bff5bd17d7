package lease

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

func applyKey(t *testing.T, f *fsm, index uint64, k *statev1.MemberKey) any {
	t.Helper()
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_MemberKey{MemberKey: k}})
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

func heldKeys(f *fsm) []string {
	var out []string
	for _, k := range f.keys.list() {
		out = append(out, k.NodeID+"@"+k.Address)
	}
	return out
}

// TestMemberKeyRules: a key replaces the one of its node id or its
// address; invalid keys and keys past the cap are skipped, counted, and
// change nothing.
func TestMemberKeyRules(t *testing.T) {
	f := newFSM(nil, quietLog(), newSkippedCounter())
	_, other := newKey(t)
	steps := []struct {
		key  *statev1.MemberKey
		fail string // part of the error; empty: applied
		want []string
	}{
		{key: &statev1.MemberKey{NodeId: "a", Address: "10.0.0.1:7390", PublicKey: fuzzKey}, want: []string{"a@10.0.0.1:7390"}},
		{key: &statev1.MemberKey{NodeId: "b", Address: "10.0.0.2:7390", PublicKey: other}, want: []string{"a@10.0.0.1:7390", "b@10.0.0.2:7390"}},
		{key: &statev1.MemberKey{NodeId: "a", Address: "10.0.0.3:7390", PublicKey: fuzzKey}, want: []string{"a@10.0.0.3:7390", "b@10.0.0.2:7390"}},
		{key: &statev1.MemberKey{NodeId: "c", Address: "10.0.0.2:7390", PublicKey: other}, want: []string{"a@10.0.0.3:7390", "c@10.0.0.2:7390"}},
		{key: &statev1.MemberKey{NodeId: "bad id", Address: "10.0.0.4:7390", PublicKey: fuzzKey}, fail: "node_id"},
		{key: &statev1.MemberKey{NodeId: "d", Address: "10.0.0.4", PublicKey: fuzzKey}, fail: "address"},
		{key: &statev1.MemberKey{NodeId: "d", Address: strings.Repeat("h", 251) + ":7390", PublicKey: fuzzKey}, fail: "address"},
		{key: &statev1.MemberKey{NodeId: "d", Address: "10.0.0.4:7390", PublicKey: []byte("not der")}, fail: "public_key"},
		{key: &statev1.MemberKey{NodeId: "d", Address: "10.0.0.4:7390"}, fail: "public_key"},
	}
	for i, s := range steps {
		before := heldKeys(f)
		res := applyKey(t, f, uint64(i+1), s.key)
		err, failed := res.(error)
		switch {
		case s.fail == "" && failed:
			t.Fatalf("step %d: %v", i, err)
		case s.fail != "" && (!failed || !strings.Contains(err.Error(), s.fail)):
			t.Fatalf("step %d: result %v; want an error naming %s", i, res, s.fail)
		case s.fail != "":
			s.want = before
		}
		if diff := cmp.Diff(s.want, heldKeys(f)); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s", i, diff)
		}
	}
	if got := counterValue(t, f.skipped); got != 5 {
		t.Fatalf("skipped = %v; want 5", got)
	}

	// The cap: the 65th node id is refused, a known one still replaces.
	for i := len(f.keys.list()); i < maxMemberKeys; i++ {
		if res := applyKey(t, f, uint64(100+i), &statev1.MemberKey{NodeId: fmt.Sprintf("n%02d", i), Address: fmt.Sprintf("10.1.0.%d:1", i), PublicKey: fuzzKey}); res != nil {
			t.Fatalf("key %d: %v", i, res)
		}
	}
	if res, _ := applyKey(t, f, 200, &statev1.MemberKey{NodeId: "z", Address: "10.2.0.1:1", PublicKey: fuzzKey}).(error); res == nil || !strings.Contains(res.Error(), "limit") {
		t.Fatalf("key past the cap: %v; want refused", res)
	}
	if res := applyKey(t, f, 201, &statev1.MemberKey{NodeId: "a", Address: "10.2.0.2:1", PublicKey: other}); res != nil {
		t.Fatalf("replacing at the cap: %v", res)
	}
	if n := len(f.keys.list()); n != maxMemberKeys {
		t.Fatalf("%d keys; want %d", n, maxMemberKeys)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestMemberKeysSurviveSnapshot: published keys are in the snapshot and
// come back after a restart that restores it.
func TestMemberKeysSurviveSnapshot(t *testing.T) {
	dir := t.TempDir()
	_, der := newKey(t)
	h := startConfig(t, Config{Dir: dir, PublicKey: der})
	waitFor(t, func() bool { return len(h.node.Keys()) == 1 })
	if err := h.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	h.close()
	h = startConfig(t, Config{Dir: dir}) // publishes nothing itself
	defer h.close()
	keys := h.node.Keys()
	if len(keys) != 1 || keys[0].KID != keyID(der) || keys[0].NodeID != "appliance-1" {
		t.Fatalf("Keys() after restoring the snapshot = %+v", keys)
	}
}
