package lease

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
	f.epoch, f.holder, f.external = 3, "appliance-1", 4
	return f, st
}

// withExternal is a serialized snapshot with its external epoch set.
func withExternal(tb testing.TB, snap []byte, external uint64) []byte {
	tb.Helper()
	var s statev1.Snapshot
	if err := proto.Unmarshal(snap, &s); err != nil {
		tb.Fatal(err)
	}
	s.ExternalEpoch = external
	out, err := proto.Marshal(&s)
	if err != nil {
		tb.Fatal(err)
	}
	return out
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
	f.Add(withExternal(f, fuzzSnapshot(f, 7, "appliance-2", &statev1.SiteState{}), 9))
	f.Add(withExternal(f, fuzzSnapshot(f, 7, "appliance-2", &statev1.SiteState{}), 2)) // lowers it: refused
	f.Fuzz(func(t *testing.T, data []byte) {
		fm, st := fuzzFSM(t)
		before, _ := st.MarshalState()
		if err := fm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			after, _ := st.MarshalState()
			if e, h := fm.current(); !bytes.Equal(before, after) || e != 3 || h != "appliance-1" || fm.externalEpoch() != 4 {
				t.Fatalf("a refused snapshot (%v) changed the state or an epoch", err)
			}
			return
		}
		if ext := fm.externalEpoch(); ext < 4 {
			t.Fatalf("a restored snapshot lowered the external epoch from 4 to %d", ext)
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
		if !bytes.Equal(a, b) || e1 != e2 || h1 != h2 || fm.externalEpoch() != again.externalEpoch() {
			t.Fatal("a snapshot of a restored state restores differently")
		}
	})
}

// FuzzApplyEntry applies arbitrary bytes as a committed log entry. It must
// never panic, and neither epoch ever goes down: the lease epoch moves only
// by one, to a valid holder; the external epoch only up.
func FuzzApplyEntry(f *testing.F) {
	for _, e := range []*statev1.LogEntry{
		{Kind: &statev1.LogEntry_ExternalEpoch{ExternalEpoch: &statev1.ExternalEpoch{Epoch: 9}}},
		{Kind: &statev1.LogEntry_ExternalEpoch{ExternalEpoch: &statev1.ExternalEpoch{Epoch: 1}}},
		{Kind: &statev1.LogEntry_ExternalEpoch{ExternalEpoch: &statev1.ExternalEpoch{}}},
		{Kind: &statev1.LogEntry_LeaseEpoch{LeaseEpoch: &statev1.LeaseEpoch{Epoch: 4, Holder: "appliance-2"}}},
		{Kind: &statev1.LogEntry_LeaseEpoch{LeaseEpoch: &statev1.LeaseEpoch{Epoch: 4, Holder: "bad holder"}}},
	} {
		data, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0x22, 0x02, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		fm, _ := fuzzFSM(t)
		fm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data})
		e, h := fm.current()
		switch {
		case e != 3 && e != 4:
			t.Fatalf("lease epoch 3 became %d", e)
		case e == 4 && checkHolder(h) != nil:
			t.Fatalf("epoch 4 taken by holder %q", h)
		case fm.externalEpoch() < 4:
			t.Fatalf("external epoch 4 went down to %d", fm.externalEpoch())
		}
		var le statev1.LogEntry
		if ext := fm.externalEpoch(); ext != 4 && (proto.Unmarshal(data, &le) != nil || le.GetExternalEpoch().GetEpoch() != ext) {
			t.Fatalf("external epoch became %d, which the entry does not hold", ext)
		}
	})
}
