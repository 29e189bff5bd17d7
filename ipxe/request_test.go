package ipxe

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name      string
		in        *sitev1.IpxeScriptRequest
		want      *sitev1.IpxeScriptRequest
		wantField string
	}{
		{
			name: "iPXE's own forms",
			in:   &sitev1.IpxeScriptRequest{Mac: "52:54:00:AB:CD:EF", Uuid: "8F0C1B2A-3D4E-4F50-8A6B-7C8D9E0F1A2B", Buildarch: "x86_64", Platform: "efi", Serial: "To Be Filled By O.E.M.", Asset: "é"},
			want: &sitev1.IpxeScriptRequest{Mac: "52:54:00:ab:cd:ef", Uuid: "8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2b", Buildarch: "x86_64", Platform: "efi", Serial: "To Be Filled By O.E.M.", Asset: "é"},
		},
		{
			name: "SMBIOS all-zero UUID is none",
			in:   &sitev1.IpxeScriptRequest{Mac: "5254000000aa", Uuid: "00000000-0000-0000-0000-000000000000"},
			want: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa"},
		},
		{
			name: "SMBIOS all-FF UUID is none",
			in:   &sitev1.IpxeScriptRequest{Mac: "52-54-00-00-00-aa", Uuid: "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"},
			want: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa"},
		},
		{
			name: "IPv4-mapped IP",
			in:   &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Ip: "::ffff:10.0.0.7"},
			want: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Ip: "10.0.0.7"},
		},
		{name: "serial too long", in: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Serial: string(make([]byte, 257))}, wantField: "serial"},
		{name: "asset with DEL", in: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Asset: "a\x7f"}, wantField: "asset"},
		{name: "buildarch too long", in: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Buildarch: "x86_64x86_64x86_64"}, wantField: "buildarch"},
		{name: "broadcast mac", in: &sitev1.IpxeScriptRequest{Mac: "ff:ff:ff:ff:ff:ff"}, wantField: "mac"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalize(tt.in)
			var re *RequestError
			if tt.wantField != "" {
				if !errors.As(err, &re) || re.Field != tt.wantField {
					t.Fatalf("normalize error = %v, want one for field %q", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("normalize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseQuery(t *testing.T) {
	got, err := parseQuery("mac=52%3A54%3A00%3A00%3A00%3Aaa&uuid=&buildarch=i386&platform=pcbios&serial=SN%201&asset=&ip=1.2.3.4&other=x")
	if err != nil {
		t.Fatal(err)
	}
	want := &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:aa", Buildarch: "i386", Platform: "pcbios", Serial: "SN 1"}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("parseQuery (-want +got):\n%s", diff)
	}
}
