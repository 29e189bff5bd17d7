package bootentry

import (
	"strings"
	"testing"
)

func TestNormalizeMAC(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "52:54:00:12:34:56", want: "52:54:00:12:34:56"},
		{in: "52:54:00:AB:CD:EF", want: "52:54:00:ab:cd:ef"},
		{in: "52-54-00-AB-CD-EF", want: "52:54:00:ab:cd:ef"},
		{in: "5254.00ab.cdef", want: "52:54:00:ab:cd:ef"},
		{in: "525400ABCDEF", want: "52:54:00:ab:cd:ef"},
		{in: " 52:54:00:ab:cd:ef ", want: "52:54:00:ab:cd:ef"},
		{in: "", wantErr: "is not a MAC address"},
		{in: "zz:54:00:ab:cd:ef", wantErr: "is not a MAC address"},
		{in: "52:54:00:ab:cd", wantErr: "is not a MAC address"},
		{in: "52:54:00:ab:cd:ef:01:02", wantErr: "6-byte"},
		{in: "01:00:5e:00:00:01", wantErr: "multicast"},
		{in: "ff:ff:ff:ff:ff:ff", wantErr: "multicast"},
		{in: "00:00:00:00:00:00", wantErr: "all-zero"},
		{in: "52:54:00:ab:cd:ef\n", want: "52:54:00:ab:cd:ef"},
		{in: "52:54:00:ab:cd:ef;reboot", wantErr: "is not a MAC address"},
	}
	for _, tt := range tests {
		got, err := NormalizeMAC(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NormalizeMAC(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeMAC(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNormalizeUUID(t *testing.T) {
	const want = "4c4c4544-0047-3510-8052-b4c04f4e3832"
	for _, in := range []string{
		"4C4C4544-0047-3510-8052-B4C04F4E3832",
		"4c4c4544004735108052b4c04f4e3832",
		"{4c4c4544-0047-3510-8052-b4c04f4e3832}",
		"urn:uuid:4c4c4544-0047-3510-8052-b4c04f4e3832",
	} {
		if got, err := NormalizeUUID(in); err != nil || got != want {
			t.Errorf("NormalizeUUID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4c4c4544", "4c4c4544-0047-3510-8052-b4c04f4e383z", "4c4c45440-047-3510-8052-b4c04f4e3832"} {
		if got, err := NormalizeUUID(in); err == nil {
			t.Errorf("NormalizeUUID(%q) = %q, want an error", in, got)
		}
	}
}

func TestCheckProductUUID(t *testing.T) {
	if got, err := CheckProductUUID("{4C4C4544-0047-3510-8052-B4C04F4E3832}"); err != nil || got != "4c4c4544-0047-3510-8052-b4c04f4e3832" {
		t.Errorf("CheckProductUUID = %q, %v", got, err)
	}
	for _, in := range []string{"00000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "nope"} {
		if got, err := CheckProductUUID(in); err == nil {
			t.Errorf("CheckProductUUID(%q) = %q; want an error", in, got)
		}
	}
}

func TestAcceptsUUID(t *testing.T) {
	const u = "4c4c4544-0047-3510-8052-b4c04f4e3832"
	pinned, open := Entry{ProductUUID: u}, Entry{}
	for _, tt := range []struct {
		e    Entry
		uuid string
		want bool
	}{
		{open, "", true}, {open, u, true}, {pinned, u, true},
		{pinned, "", false}, {pinned, "4c4c4544-0047-3510-8052-b4c04f4e3833", false},
		{pinned, strings.ToUpper(u), false}, // readers normalise before they ask
	} {
		if got := tt.e.AcceptsUUID(tt.uuid); got != tt.want {
			t.Errorf("Entry{ProductUUID: %q}.AcceptsUUID(%q) = %v, want %v", tt.e.ProductUUID, tt.uuid, got, tt.want)
		}
	}
}
