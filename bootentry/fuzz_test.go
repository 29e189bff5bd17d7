package bootentry

import (
	"net/url"
	"strings"
	"testing"
)

func FuzzNormalizeMAC(f *testing.F) {
	for _, s := range []string{"52:54:00:12:34:56", "5254.0012.3456", "525400123456", "52-54-00-12-34-56", "", "ff:ff:ff:ff:ff:ff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeMAC(s)
		if err != nil {
			return
		}
		if len(got) != 17 || strings.ToLower(got) != got {
			t.Fatalf("NormalizeMAC(%q) = %q: not lowercase colon form", s, got)
		}
		again, err := NormalizeMAC(got)
		if err != nil || again != got {
			t.Fatalf("NormalizeMAC not idempotent: %q -> %q -> %q, %v", s, got, again, err)
		}
	})
}

func FuzzNormalizeUUID(f *testing.F) {
	for _, s := range []string{"4c4c4544-0047-3510-8052-b4c04f4e3832", "{4C4C4544-0047-3510-8052-B4C04F4E3832}", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeUUID(s)
		if err != nil {
			return
		}
		if len(got) != 36 || strings.ToLower(got) != got {
			t.Fatalf("NormalizeUUID(%q) = %q", s, got)
		}
		if again, err := NormalizeUUID(got); err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, got, again, err)
		}
	})
}

// FuzzCheckBootFile: whatever CheckBootFile accepts fits the BOOTP file
// field and is one plain script token: no whitespace, control character,
// '$', '#', '\\', '"' or backtick; a URL parses as http(s) with a host.
func FuzzCheckBootFile(f *testing.F) {
	for _, s := range []string{"", "ipxe.efi", "efi/snponly.efi", "http://10.0.0.2/a.efi", "http://a/${x}", "a b", "../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckBootFile(s) != nil {
			return
		}
		if len(s) > MaxBootFileLen || (!IsURL(s) && len(s) > MaxBootFileNameLen) || strings.ContainsAny(s, " \t\r\n$#\\\"`") {
			t.Fatalf("accepted %q", s)
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x21 || s[i] > 0x7e {
				t.Fatalf("accepted %q with byte %#x", s, s[i])
			}
		}
		if IsURL(s) {
			u, err := url.Parse(s)
			if err != nil || u.Hostname() == "" {
				t.Fatalf("accepted URL %q: %v", s, err)
			}
		}
	})
}
