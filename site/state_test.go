package site

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// directApplier applies commands straight to a State, as a one-node log
// would; the raft path is tested in the lease package.
type directApplier struct{ s *State }

func (d directApplier) ApplySite(_ context.Context, cmd []byte) (any, error) {
	return d.s.ApplyCommand(cmd), nil
}

// readyImages holds every digest whose first byte is not 0xee.
type readyImages struct{}

func (readyImages) Ready(d [32]byte) bool { return d[0] != 0xee }

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestStore() (*Store, *State, *fakeClock) {
	st := NewState()
	clk := &fakeClock{t: testNow}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return NewStore(StoreConfig{State: st, Applier: directApplier{st}, Now: clk.now, Limits: testLimits, Logger: log, Images: readyImages{}}), st, clk
}

func macsOf(entries []*statev1.StoredEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetNodeId()+"/"+e.GetEntry().GetMac())
	}
	return out
}

func TestStorePrepareAndList(t *testing.T) {
	s, st, _ := newTestStore()
	ctx := context.Background()
	if _, err := s.PrepareRamdisk(ctx, "n2", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:02"}}); err != nil {
		t.Fatal(err)
	}
	stored, err := s.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:0B"}, {Mac: "52:54:00:00:00:0a", WorkflowId: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:0b", "n1/52:54:00:00:00:0a"}, macsOf(stored)); diff != "" {
		t.Fatalf("stored (-want +got):\n%s", diff)
	}
	if got := stored[0].GetCreatedAt().AsTime(); !got.Equal(testNow) {
		t.Fatalf("created_at = %v, want %v", got, testNow)
	}
	want := []string{"n1/52:54:00:00:00:0a", "n1/52:54:00:00:00:0b", "n2/52:54:00:00:00:02"}
	if diff := cmp.Diff(want, macsOf(st.List(""))); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n2/52:54:00:00:00:02"}, macsOf(st.List("n2"))); diff != "" {
		t.Fatalf("List(n2) (-want +got):\n%s", diff)
	}
	// Replacing a MAC of the same node updates it in place.
	if _, err := s.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:0a", WorkflowId: "w2"}}); err != nil {
		t.Fatal(err)
	}
	got, ok := st.Lookup("52:54:00:00:00:0a", testNow)
	if !ok || got.WorkflowID != "w2" {
		t.Fatalf("Lookup after replace = %v, %v; want workflow w2", got, ok)
	}
	if e, l, n := st.Counts(testNow); e != 3 || l != 3 || n != 2 {
		t.Fatalf("Counts = %d, %d, %d; want 3, 3, 2", e, l, n)
	}
}

func TestStoreConflictChangesNothing(t *testing.T) {
	s, st, _ := newTestStore()
	ctx := context.Background()
	if _, err := s.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := st.MarshalState()
	_, err := s.PrepareRamdisk(ctx, "n2", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:09"}, {Mac: "52-54-00-00-00-01"}})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Owner != "n1" || ce.Field != "entries[1].mac" || ce.MAC != "52:54:00:00:00:01" {
		t.Fatalf("err = %v; want a conflict on entries[1].mac owned by n1", err)
	}
	after, _ := st.MarshalState()
	if string(before) != string(after) {
		t.Fatal("a refused request changed the state")
	}
}

func TestStateMachineConflictIsAtomic(t *testing.T) {
	// The state machine re-checks ownership: a command that slipped past the
	// store's pre-check (a race between two writers) still changes nothing.
	st := NewState()
	apply := func(node string, macs ...string) any {
		p := &statev1.PutEntries{NodeId: node}
		for _, m := range macs {
			p.Entries = append(p.Entries, &sitev1.ProxyDhcpEntry{Mac: m, NotAfter: timestamppb.New(testNow.Add(time.Hour))})
		}
		data := mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(testNow), Op: &statev1.SiteCommand_PutEntries{PutEntries: p}})
		return st.ApplyCommand(data)
	}
	if res, ok := apply("n1", "52:54:00:00:00:01").(*PutResult); !ok || len(res.Stored) != 1 {
		t.Fatalf("first put = %v", res)
	}
	if err, ok := apply("n2", "52:54:00:00:00:02", "52:54:00:00:00:01").(*ConflictError); !ok || err.Owner != "n1" {
		t.Fatalf("conflicting put = %v; want *ConflictError", err)
	}
	if _, ok := st.Lookup("52:54:00:00:00:02", testNow); ok {
		t.Fatal("the refused command stored its first entry")
	}
	if err, ok := st.ApplyCommand([]byte{0xff, 0xff}).(error); !ok || !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("garbage command = %v; want ErrUnknownCommand", err)
	}
	if err, ok := st.ApplyCommand(nil).(error); !ok || !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("empty command = %v; want ErrUnknownCommand", err)
	}
}

func TestStoreCleanUp(t *testing.T) {
	tests := []struct {
		name string
		req  *sitev1.BootCleanUpRequest
		want []string // removed
		left []string
	}{
		{"whole node", &sitev1.BootCleanUpRequest{NodeId: "n1"},
			[]string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"}, []string{"n2/52:54:00:00:00:09"}},
		{"by mac, any notation", &sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"5254.0000.0002"}},
			[]string{"52:54:00:00:00:02"}, []string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:03", "n2/52:54:00:00:00:09"}},
		{"by workflow", &sitev1.BootCleanUpRequest{NodeId: "n1", WorkflowId: "w1"},
			[]string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, []string{"n1/52:54:00:00:00:03", "n2/52:54:00:00:00:09"}},
		{"mac and workflow", &sitev1.BootCleanUpRequest{NodeId: "n1", WorkflowId: "w1", Macs: []string{"52:54:00:00:00:03", "52:54:00:00:00:02"}},
			[]string{"52:54:00:00:00:02"}, []string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:03", "n2/52:54:00:00:00:09"}},
		{"another node's mac is untouched", &sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"52:54:00:00:00:09"}},
			nil, []string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:02", "n1/52:54:00:00:00:03", "n2/52:54:00:00:00:09"}},
		{"unknown node", &sitev1.BootCleanUpRequest{NodeId: "n7"},
			nil, []string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:02", "n1/52:54:00:00:00:03", "n2/52:54:00:00:00:09"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, st, _ := newTestStore()
			ctx := context.Background()
			mustPrepare(t, s, "n1", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:01", WorkflowId: "w1"},
				&sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:02", WorkflowId: "w1"}, &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:03", WorkflowId: "w2"})
			mustPrepare(t, s, "n2", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:09", WorkflowId: "w1"})
			removed, err := s.CleanUp(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, removed); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.left, macsOf(st.List(""))); diff != "" {
				t.Errorf("left (-want +got):\n%s", diff)
			}
		})
	}
}

func mustPrepare(t *testing.T, s *Store, node string, entries ...*sitev1.ProxyDhcpEntry) {
	t.Helper()
	if _, err := s.PrepareRamdisk(context.Background(), node, entries); err != nil {
		t.Fatal(err)
	}
}

func TestExpiry(t *testing.T) {
	s, st, clk := newTestStore()
	ctx := context.Background()
	mustPrepare(t, s, "n1",
		&sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:01", NotAfter: timestamppb.New(testNow.Add(time.Minute))},
		&sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:02", NotAfter: timestamppb.New(testNow.Add(time.Hour))})
	if _, ok := st.Lookup("52:54:00:00:00:01", testNow.Add(time.Minute-time.Nanosecond)); !ok {
		t.Fatal("entry not live just before not_after")
	}
	// At not_after the entry is no longer answered, before any purge.
	if _, ok := st.Lookup("52:54:00:00:00:01", testNow.Add(time.Minute)); ok {
		t.Fatal("entry still answered at not_after")
	}
	clk.t = testNow.Add(time.Minute)
	removed, err := s.Expire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"52:54:00:00:00:01"}, removed); diff != "" {
		t.Fatalf("expired (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:02"}, macsOf(st.List(""))); diff != "" {
		t.Fatalf("left (-want +got):\n%s", diff)
	}
	// Nothing expired: no command is proposed at all.
	if removed, err := s.Expire(ctx); err != nil || removed != nil {
		t.Fatalf("second Expire = %v, %v", removed, err)
	}
}

func TestMarshalRestoreRoundTrip(t *testing.T) {
	s, st, _ := newTestStore()
	mustPrepare(t, s, "n1", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:01", SanbootSha256: make([]byte, 32)})
	mustPrepare(t, s, "n2", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:02", DiscoveryTokenRef: "env://T"})
	data, err := st.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	restored := NewState()
	mustPrepare(t, NewStore(StoreConfig{State: restored, Applier: directApplier{restored}, Now: func() time.Time { return testNow },
		Limits: testLimits, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), "n9", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:99"})
	if err := restored.RestoreState(data); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st.List(""), restored.List(""), protocmp.Transform()); diff != "" {
		t.Fatalf("restored state differs (-orig +restored):\n%s", diff)
	}
	if _, ok := restored.byMACOwner("52:54:00:00:00:99"); ok {
		t.Fatal("restore kept an entry that was not in the snapshot")
	}
	if err := restored.RestoreState([]byte{0xff}); err == nil {
		t.Fatal("restore of garbage succeeded")
	}
}
