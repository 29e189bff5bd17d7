package site

import (
	"bytes"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// FuzzApplyCommand feeds arbitrary bytes to the state machine as a raft
// log entry's site command. It must never panic; a command it refuses must
// leave the state byte-identical; whatever it stores must pass the
// validation rules; and two replicas applying the same bytes must agree.
func FuzzApplyCommand(f *testing.F) {
	at := timestamppb.New(testNow)
	evil := []*sitev1.ProxyDhcpEntry{
		live("52:54:00:00:00:03"),
		with(live("52:54:00:00:00:04"), func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../../../etc/passwd" }),
		with(live("52:54:00:00:00:05"), func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://evil.example/c.ipxe?m=${net0/mac}" }),
	}
	for _, c := range []*statev1.SiteCommand{
		{At: at, Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n1", Entries: evil}}},
		{At: at, Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "evil node!", Entries: evil}}},
		{At: at, Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n2", Entries: []*sitev1.ProxyDhcpEntry{live("52:54:00:00:00:01")}}}},
		{At: at, Op: &statev1.SiteCommand_CleanUp{CleanUp: &sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"5254.0000.0001"}}}},
		{At: at, Op: &statev1.SiteCommand_ExpireEntries{ExpireEntries: &statev1.ExpireEntries{Before: at}}},
		{At: at, Op: &statev1.SiteCommand_ApplySiteSpec{ApplySiteSpec: &statev1.ApplySiteSpec{Spec: &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(5)}}}}},
		{At: at, Op: &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: &statev1.ImageWant{Image: img(6), Compression: "zstd"}}}},
		{At: at, Op: &statev1.SiteCommand_RemoveImage{RemoveImage: &statev1.RemoveImage{Sha256: digest(2)}}},
	} {
		f.Add(mustMarshal(f, c))
	}
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		st, other := NewState(), NewState()
		seed(t, st)
		seed(t, other)
		before, _ := st.MarshalState()
		res := st.ApplyCommand(data)
		after, _ := st.MarshalState()
		if err, failed := res.(error); failed && !bytes.Equal(before, after) {
			t.Fatalf("refused command (%v) changed the state", err)
		}
		checkHeld(t, st)
		other.ApplyCommand(data)
		if again, _ := other.MarshalState(); !bytes.Equal(after, again) {
			t.Fatal("two replicas applied the same command differently")
		}
	})
}

// checkHeld fails unless everything st holds passes the validation rules
// and its by-node index matches its entries.
func checkHeld(t *testing.T, st *State) {
	t.Helper()
	for _, se := range st.List("") {
		if err := ValidateStoredEntry(se); err != nil {
			t.Fatalf("the state holds an invalid entry %v: %v", se, err)
		}
	}
	if _, err := ValidateSiteSpec(st.Spec()); err != nil {
		t.Fatalf("the state holds an invalid spec: %v", err)
	}
	for _, w := range st.HandAddedImages() {
		if err := ValidateImageWant(w); err != nil {
			t.Fatalf("the state holds an invalid image: %v", err)
		}
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	n := 0
	for node, macs := range st.byNode {
		for mac := range macs {
			if st.byMAC[mac].GetNodeId() != node {
				t.Fatalf("index: %s under node %q, held by %q", mac, node, st.byMAC[mac].GetNodeId())
			}
			n++
		}
	}
	if n != len(st.byMAC) {
		t.Fatalf("index lists %d MACs; the state holds %d", n, len(st.byMAC))
	}
}
