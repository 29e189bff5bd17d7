package site

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestLookupReadModel: Lookup returns the boot path's view of an entry,
// built when the entry is stored, and follows replace, clean-up, expiry
// and restore.
func TestLookupReadModel(t *testing.T) {
	const mac = "52:54:00:00:00:0a"
	notAfter := testNow.Add(time.Hour)
	full := &sitev1.ProxyDhcpEntry{
		Mac: mac, ProductUuid: "4c4c4544-0047-3510-8052-b4c04f4e3832", Arch: sitev1.BootArch_BOOT_ARCH_X86_64_EFI,
		BootFile: "efi/snponly.efi", IpxeScriptUrl: "https://cp.example/ipxe/n1", WorkflowId: "wf-1",
		DiscoveryTokenRef: "env://BC_TOKEN", SanbootSha256: bytes.Repeat([]byte{0xab}, 32), NotAfter: timestamppb.New(notAfter),
	}
	st := NewState()
	put := func(e *sitev1.ProxyDhcpEntry) {
		t.Helper()
		data := mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(testNow),
			Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n1", Entries: []*sitev1.ProxyDhcpEntry{e}}}})
		if err, ok := st.ApplyCommand(data).(error); ok {
			t.Fatal(err)
		}
	}
	put(full)
	want := bootentry.Entry{
		NodeID: "n1", MAC: mac, ProductUUID: "4c4c4544-0047-3510-8052-b4c04f4e3832", Arch: "x86_64-efi",
		WorkflowID: "wf-1", BootFile: "efi/snponly.efi", IPXEScriptURL: "https://cp.example/ipxe/n1",
		SanbootSHA256:     "abababababababababababababababababababababababababababababababab",
		DiscoveryTokenRef: "env://BC_TOKEN", NotAfter: notAfter,
	}
	got, ok := st.Lookup(mac, testNow)
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Fatalf("Lookup = %v (-want +got):\n%s", ok, diff)
	}
	if _, ok := st.Lookup(mac, notAfter); ok {
		t.Error("Lookup at not_after returned the entry")
	}

	snap, err := st.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	put(&sitev1.ProxyDhcpEntry{Mac: mac, NotAfter: timestamppb.New(notAfter)})
	if got, _ := st.Lookup(mac, testNow); got.WorkflowID != "" || got.SanbootSHA256 != "" || got.ProductUUID != "" {
		t.Errorf("Lookup after replace = %+v; want the replacement's empty fields", got)
	}
	clean := mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(testNow), Op: &statev1.SiteCommand_CleanUp{CleanUp: &sitev1.BootCleanUpRequest{NodeId: "n1"}}})
	if err, ok := st.ApplyCommand(clean).(error); ok {
		t.Fatal(err)
	}
	if _, ok := st.Lookup(mac, testNow); ok {
		t.Error("Lookup after clean-up returned the entry")
	}
	if err := st.RestoreState(snap); err != nil {
		t.Fatal(err)
	}
	got, ok = st.Lookup(mac, testNow)
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Fatalf("Lookup after restore = %v (-want +got):\n%s", ok, diff)
	}
	expire := mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(notAfter), Op: &statev1.SiteCommand_ExpireEntries{
		ExpireEntries: &statev1.ExpireEntries{Before: timestamppb.New(notAfter)}}})
	if err, ok := st.ApplyCommand(expire).(error); ok {
		t.Fatal(err)
	}
	if _, ok := st.Lookup(mac, testNow); ok {
		t.Error("Lookup after expiry returned the entry")
	}
}

// TestLookupAllocatesNothing: the DHCP path looks an entry up for every
// packet.
func TestLookupAllocatesNothing(t *testing.T) {
	st := NewState()
	data := mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(testNow), Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n1",
		Entries: []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:0a", WorkflowId: "w", NotAfter: timestamppb.New(testNow.Add(time.Hour))}}}}})
	if err, ok := st.ApplyCommand(data).(error); ok {
		t.Fatal(err)
	}
	var sink bootentry.Entry
	allocs := testing.AllocsPerRun(100, func() {
		e, _ := st.Lookup("52:54:00:00:00:0a", testNow)
		sink = e
	})
	if allocs != 0 || sink.WorkflowID != "w" {
		t.Fatalf("Lookup: %v allocations per call (entry %+v), want 0", allocs, sink)
	}
}
