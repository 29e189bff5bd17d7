package lease

import (
	"bytes"
	"io"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var fuzzNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func fuzzSnapshot(tb testing.TB, epoch uint64, holder string, st *statev1.SiteState) []byte {
	tb.Helper()
	inner, err := proto.Marshal(st)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := proto.Marshal(&statev1.Snapshot{LeaseEpoch: epoch, LeaseHolder: holder, SiteState: inner})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// fuzzFSM is an fsm at epoch 3 whose state holds one entry.
func fuzzFSM(tb testing.TB) (*fsm, *site.State) {
	tb.Helper()
	st := site.NewState()
	cmd, err := proto.Marshal(&statev1.SiteCommand{At: timestamppb.New(fuzzNow), Op: &statev1.SiteCommand_PutEntries{
		PutEntries: &statev1.PutEntries{NodeId: "n1", Entries: []*sitev1.ProxyDhcpEntry{
			{Mac: "52:54:00:00:00:01", NotAfter: timestamppb.New(fuzzNow.Add(time.Hour))}}}}})
	if err != nil {
		tb.Fatal(err)
	}
	if err, failed := st.ApplyCommand(cmd).(error); failed {
		tb.Fatal(err)
	}
	f := newFSM(st, quietLog(), newSkippedCounter())
	f.epoch, f.holder = 3, "appliance-1"
	return f, st
}

// FuzzRestore feeds arbitrary bytes to the raft FSM as a snapshot. It must
// never panic; a refused snapshot must leave the state and the epoch as
// they were; a restored one holds only entries that pass the validation
// rules, and snapshotting it and restoring that gives the same state.
func FuzzRestore(f *testing.F) {
	na := timestamppb.New(fuzzNow.Add(time.Hour))
	f.Add(fuzzSnapshot(f, 7, "appliance-2", &statev1.SiteState{
		Entries: []*statev1.StoredEntry{{NodeId: "n2", Entry: &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:02", NotAfter: na}}},
		Images:  []*statev1.ImageWant{{Image: &sitev1.CacheImage{Url: "https://h/a.iso", Sha256: bytes.Repeat([]byte{1}, 32)}}},
		Spec:    &sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "n2", Addresses: []string{"10.0.0.9"}}}},
	}))
	f.Add(fuzzSnapshot(f, 9, "evil node!", &statev1.SiteState{Entries: []*statev1.StoredEntry{
		{NodeId: "evil node!", Entry: &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:03", NotAfter: na}},
		{NodeId: "n3", Entry: &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:04", BootFile: "../../../etc/passwd", NotAfter: na}},
		{NodeId: "n3", Entry: &sitev1.ProxyDhcpEntry{Mac: "52-54-00-00-00-05", IpxeScriptUrl: "http://evil.example/?${mac}", NotAfter: na}},
	}}))
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fm, st := fuzzFSM(t)
		before, _ := st.MarshalState()
		if err := fm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			after, _ := st.MarshalState()
			if e, h := fm.current(); !bytes.Equal(before, after) || e != 3 || h != "appliance-1" {
				t.Fatalf("a refused snapshot (%v) changed the state or the epoch", err)
			}
			return
		}
		for _, se := range st.List("") {
			if err := site.ValidateStoredEntry(se); err != nil {
				t.Fatalf("restored an invalid entry %v: %v", se, err)
			}
		}
		if _, h := fm.current(); h != "" && checkHolder(h) != nil {
			t.Fatalf("restored holder %q", h)
		}
		snap, err := fm.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		again, st2 := fuzzFSM(t)
		if err := again.Restore(io.NopCloser(bytes.NewReader(snap.(snapshot)))); err != nil {
			t.Fatalf("restoring a snapshot of a restored state: %v", err)
		}
		a, _ := st.MarshalState()
		b, _ := st2.MarshalState()
		e1, h1 := fm.current()
		e2, h2 := again.current()
		if !bytes.Equal(a, b) || e1 != e2 || h1 != h2 {
			t.Fatal("a snapshot of a restored state restores differently")
		}
	})
}
