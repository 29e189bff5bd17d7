package site

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var testLimits = Limits{DefaultTTL: 24 * time.Hour, MaxTTL: 30 * 24 * time.Hour}

func entry(mods ...func(*sitev1.ProxyDhcpEntry)) *sitev1.ProxyDhcpEntry {
	e := &sitev1.ProxyDhcpEntry{Mac: "52:54:00:12:34:56"}
	for _, m := range mods {
		m(e)
	}
	return e
}

func TestValidateEntriesRefusals(t *testing.T) {
	past := timestamppb.New(testNow.Add(-time.Second))
	tests := []struct {
		name    string
		node    string
		entries []*sitev1.ProxyDhcpEntry
		field   string
		reason  string
	}{
		{"no node", "", []*sitev1.ProxyDhcpEntry{entry()}, "node_id", "is required"},
		{"bad node char", "node 1", []*sitev1.ProxyDhcpEntry{entry()}, "node_id", `character ' '`},
		{"long node", strings.Repeat("n", 129), []*sitev1.ProxyDhcpEntry{entry()}, "node_id", "longer than"},
		{"no entries", "n1", nil, "entries", "at least one"},
		{"too many", "n1", make([]*sitev1.ProxyDhcpEntry, MaxEntriesPerRequest+1), "entries", "at most"},
		{"nil entry", "n1", []*sitev1.ProxyDhcpEntry{nil}, "entries[0]", "is empty"},
		{"bad mac", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.Mac = "nope" })}, "entries[0].mac", "not a MAC"},
		{"dup mac other notation", "n1", []*sitev1.ProxyDhcpEntry{entry(), entry(func(e *sitev1.ProxyDhcpEntry) { e.Mac = "5254.0012.3456" })}, "entries[1].mac", "also entries[0].mac"},
		{"bad uuid", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.ProductUuid = "xyz" })}, "entries[0].product_uuid", "not a UUID"},
		{"unknown arch", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.Arch = 42 })}, "entries[0].arch", "unknown boot arch 42"},
		{"boot file dotdot", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../etc/passwd" })}, "entries[0].boot_file", "plain relative"},
		{"boot file absolute", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "/etc/passwd" })}, "entries[0].boot_file", "plain relative"},
		{"boot file backslash", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = `a\b` })}, "entries[0].boot_file", "character"},
		{"script url relative", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "/boot.ipxe" })}, "entries[0].ipxe_script_url", "absolute http"},
		{"script url ftp", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "ftp://h/x" })}, "entries[0].ipxe_script_url", "absolute http"},
		{"script url no host", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http:///x" })}, "entries[0].ipxe_script_url", "no host"},
		{"script url userinfo", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "https://u:p@h/x" })}, "entries[0].ipxe_script_url", "credentials"},
		{"script url expansion", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "https://h/${net0/mac}" })}, "entries[0].ipxe_script_url", "character '$'"},
		{"script url space", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "https://h/a b" })}, "entries[0].ipxe_script_url", "character ' '"},
		{"boot file url space", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "http://h/a b.efi" })}, "entries[0].boot_file", "character ' '"},
		{"boot file url expansion", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "http://h/${x}.efi" })}, "entries[0].boot_file", "character '$'"},
		{"boot file name too long", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.BootFile = strings.Repeat("a", 65) })}, "entries[0].boot_file", "at most 64"},
		{"placeholder uuid", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.ProductUuid = "00000000-0000-0000-0000-000000000000" })}, "entries[0].product_uuid", "no UUID"},
		{"bad workflow", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.WorkflowId = "wf\n1" })}, "entries[0].workflow_id", "character"},
		{"bad token ref", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.DiscoveryTokenRef = "plaintext-token" })}, "entries[0].discovery_token_ref", "secret ref"},
		{"short digest", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.SanbootSha256 = make([]byte, 31) })}, "entries[0].sanboot_sha256", "31 bytes"},
		{"past not_after", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.NotAfter = past })}, "entries[0].not_after", "not in the future"},
		{"now not_after", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.NotAfter = timestamppb.New(testNow) })}, "entries[0].not_after", "not in the future"},
		{"far not_after", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.NotAfter = timestamppb.New(testNow.Add(31 * 24 * time.Hour)) })}, "entries[0].not_after", "maximum ttl"},
		{"invalid timestamp", "n1", []*sitev1.ProxyDhcpEntry{entry(func(e *sitev1.ProxyDhcpEntry) { e.NotAfter = &timestamppb.Timestamp{Nanos: -1} })}, "entries[0].not_after", "nanos"},
		{"second entry bad", "n1", []*sitev1.ProxyDhcpEntry{entry(), entry(func(e *sitev1.ProxyDhcpEntry) { e.Mac = "52:54:00:12:34:57"; e.Arch = 9 })}, "entries[1].arch", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before []*sitev1.ProxyDhcpEntry
			for _, e := range tt.entries {
				if e != nil {
					before = append(before, cloneEntry(e))
				}
			}
			got, err := ValidateEntries(tt.node, tt.entries, testNow, testLimits)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("ValidateEntries = %v, %v; want a *FieldError", got, err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Reason, tt.reason) {
				t.Fatalf("error = %q; want field %q with reason containing %q", err, tt.field, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), tt.field+": ") {
				t.Fatalf("error %q does not start with the field name", err)
			}
			var after []*sitev1.ProxyDhcpEntry
			for _, e := range tt.entries {
				if e != nil {
					after = append(after, e)
				}
			}
			if diff := cmp.Diff(before, after, protocmp.Transform()); diff != "" {
				t.Fatalf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

func cloneEntry(e *sitev1.ProxyDhcpEntry) *sitev1.ProxyDhcpEntry {
	return &sitev1.ProxyDhcpEntry{Mac: e.Mac, ProductUuid: e.ProductUuid, Arch: e.Arch, BootFile: e.BootFile,
		IpxeScriptUrl: e.IpxeScriptUrl, WorkflowId: e.WorkflowId, NotAfter: e.NotAfter,
		DiscoveryTokenRef: e.DiscoveryTokenRef, SanbootSha256: e.SanbootSha256}
}

func TestValidateEntriesNormalises(t *testing.T) {
	digest := make([]byte, 32)
	notAfter := timestamppb.New(testNow.Add(2 * time.Hour))
	in := []*sitev1.ProxyDhcpEntry{
		{Mac: "52-54-00-AB-CD-EF", ProductUuid: "4C4C4544-0047-3510-8052-B4C04F4E3832", Arch: sitev1.BootArch_BOOT_ARCH_X86_64_EFI,
			BootFile: "efi/snponly.efi", IpxeScriptUrl: "https://cp.example/ipxe/n1", WorkflowId: "wf-1",
			DiscoveryTokenRef: "env://BC_TOKEN", SanbootSha256: digest, NotAfter: notAfter},
		{Mac: "525400abcdf0"},
	}
	got, err := ValidateEntries("node-1", in, testNow, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []*sitev1.ProxyDhcpEntry{
		{Mac: "52:54:00:ab:cd:ef", ProductUuid: "4c4c4544-0047-3510-8052-b4c04f4e3832", Arch: sitev1.BootArch_BOOT_ARCH_X86_64_EFI,
			BootFile: "efi/snponly.efi", IpxeScriptUrl: "https://cp.example/ipxe/n1", WorkflowId: "wf-1",
			DiscoveryTokenRef: "env://BC_TOKEN", SanbootSha256: digest, NotAfter: notAfter},
		{Mac: "52:54:00:ab:cd:f0", NotAfter: timestamppb.New(testNow.Add(24 * time.Hour))},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("normalised entries (-want +got):\n%s", diff)
	}
	if in[0].Mac != "52-54-00-AB-CD-EF" {
		t.Fatalf("input modified: %q", in[0].Mac)
	}
}

func TestValidateCleanUp(t *testing.T) {
	got, err := ValidateCleanUp(&sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"5254.00AB.CDEF"}, WorkflowId: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	want := &sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"52:54:00:ab:cd:ef"}, WorkflowId: "wf"}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	for name, req := range map[string]*sitev1.BootCleanUpRequest{
		"node_id":     {},
		"macs[1]":     {NodeId: "n1", Macs: []string{"52:54:00:ab:cd:ef", "x"}},
		"workflow_id": {NodeId: "n1", WorkflowId: "a b"},
	} {
		var fe *FieldError
		if _, err := ValidateCleanUp(req); !errors.As(err, &fe) || fe.Field != name {
			t.Errorf("ValidateCleanUp(%v) = %v; want a field error on %s", req, err, name)
		}
	}
}
