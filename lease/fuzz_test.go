package lease

import (
	"bytes"
	"encoding/base64"
	"io"
	"slices"
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
	k, err := checkMemberKey(&statev1.MemberKey{NodeId: "appliance-1", Address: "10.0.0.1:7390", PublicKey: fuzzKey})
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.keys.put(k); err != nil {
		tb.Fatal(err)
	}
	return f, st
}

// fuzzKey is a fixed P-256 public key (PKIX DER).
var fuzzKey = func() []byte {
	der, err := base64.StdEncoding.DecodeString("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE2/xZ8MO5LZ1Cbszvva0SN36zy1+G28LM6aNhykQRhgiTokPr2KY0U8Gte3k6Q/bO3RYj8RSPCQU8qn+avEEPmQ==")
	if err != nil {
		panic(err)
	}
	return der
}()

// keysOf is the fsm's member keys as snapshot bytes, for comparing.
func keysOf(tb testing.TB, f *fsm) []byte {
	tb.Helper()
	b, err := proto.Marshal(&statev1.Snapshot{MemberKeys: f.keys.snapshot()})
	if err != nil {
		tb.Fatal(err)
	}
	return b
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
	withKeys, _ := proto.Marshal(&statev1.Snapshot{LeaseEpoch: 4, LeaseHolder: "appliance-2", MemberKeys: []*statev1.MemberKey{
		{NodeId: "appliance-2", Address: "10.0.0.2:7390", PublicKey: fuzzKey},
		{NodeId: "bad id", Address: "10.0.0.3:7390", PublicKey: fuzzKey},
		{NodeId: "appliance-4", Address: "10.0.0.4", PublicKey: fuzzKey},
		{NodeId: "appliance-5", Address: "10.0.0.5:7390", PublicKey: []byte{0x30, 0x00}},
		{NodeId: "appliance-6", Address: "10.0.0.2:7390", PublicKey: fuzzKey},
	}})
	f.Add(withKeys)
	f.Add(withExternal(f, fuzzSnapshot(f, 7, "appliance-2", &statev1.SiteState{}), 9))
	f.Add(withExternal(f, fuzzSnapshot(f, 7, "appliance-2", &statev1.SiteState{}), 2)) // lowers it: refused
	f.Fuzz(func(t *testing.T, data []byte) {
		fm, st := fuzzFSM(t)
		before, _ := st.MarshalState()
		keysBefore := keysOf(t, fm)
		if err := fm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			after, _ := st.MarshalState()
			if e, h := fm.current(); !bytes.Equal(before, after) || e != 3 || h != "appliance-1" || fm.externalEpoch() != 4 || !bytes.Equal(keysBefore, keysOf(t, fm)) {
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
		checkKeys(t, fm)
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
		if !bytes.Equal(a, b) || e1 != e2 || h1 != h2 || !bytes.Equal(keysOf(t, fm), keysOf(t, again)) || fm.externalEpoch() != again.externalEpoch() {
			t.Fatal("a snapshot of a restored state restores differently")
		}
	})
}

// checkKeys fails unless every key held passes the rules, within the cap.
func checkKeys(t *testing.T, f *fsm) {
	t.Helper()
	keys := f.keys.list()
	if len(keys) > maxMemberKeys {
		t.Fatalf("%d member keys held; the cap is %d", len(keys), maxMemberKeys)
	}
	addrs := map[string]bool{}
	for _, k := range keys {
		again, err := checkMemberKey(k.proto())
		if err != nil {
			t.Fatalf("holds an invalid member key %+v: %v", k.PublicKey, err)
		}
		if again.KID != k.KID || !k.Key.Equal(again.Key) {
			t.Fatalf("key %s: kid %s, recomputed %s", k.NodeID, k.KID, again.KID)
		}
		if k.Address != "" && addrs[k.Address] {
			t.Fatalf("two member keys for the address %s", k.Address)
		}
		addrs[k.Address] = true
	}
}

// FuzzMemberKeyApply applies arbitrary member keys through the log: a
// refused one changes nothing and is counted; an accepted one is held
// under its node id, valid, with its kid.
func FuzzMemberKeyApply(f *testing.F) {
	f.Add("appliance-2", "10.0.0.2:7390", fuzzKey)
	f.Add("appliance-1", "", fuzzKey)
	f.Add("appliance-3", "10.0.0.1:7390", fuzzKey) // the address of appliance-1
	f.Add("evil node", "10.0.0.9:7390", fuzzKey)
	f.Add("appliance-4", "[::1]:65536", fuzzKey)
	f.Add("appliance-5", "h:1", append(slices.Clone(fuzzKey), 0))
	f.Add("appliance-6", "h:1", []byte{0x30, 0x03, 0x02, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, id, addr string, key []byte) {
		fm, _ := fuzzFSM(t)
		before := keysOf(t, fm)
		data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_MemberKey{MemberKey: &statev1.MemberKey{NodeId: id, Address: addr, PublicKey: key}}})
		if err != nil {
			return // not valid UTF-8: proto refuses to encode it
		}
		res := fm.Apply(&raft.Log{Index: 9, Type: raft.LogCommand, Data: data})
		if got, ok, _ := fm.results.get(9); !ok || got != res {
			t.Fatalf("result of index 9 not kept: %v", got)
		}
		if err, failed := res.(error); failed {
			if !bytes.Equal(before, keysOf(t, fm)) {
				t.Fatalf("a refused key (%v) changed the keys", err)
			}
			return
		}
		checkKeys(t, fm)
		k, ok := fm.keys.get(id)
		if !ok || k.Address != addr {
			t.Fatalf("accepted key of %q not held: %+v", id, k.PublicKey)
		}
		if _, err := checkMemberKey(&statev1.MemberKey{NodeId: id, Address: addr, PublicKey: key}); err != nil {
			t.Fatalf("applied a key the rules refuse: %v", err)
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
