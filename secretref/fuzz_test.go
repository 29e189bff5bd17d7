package secretref

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheck feeds any string to Parse and Policy.Check: neither panics, an
// accepted ref prints back as given, and a ref Check accepts names a
// variable with the prefix or a clean path strictly beneath the dir and
// outside the denied path. A refused string that is not of our form is
// not echoed.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"env://SITEBOOT_SECRET_T", "env://PATH", "file:///etc/siteboot/secrets/t", "file:///etc/siteboot/secrets",
		"file:///etc/siteboot/secrets/../x", "file:///etc/siteboot/secrets2/x", "file:///var/lib/siteboot/node.key",
		"file:///etc/siteboot/secrets//t", "file:///etc/siteboot/secrets/t\x00", "vault://x", "plaintext-token-value",
	} {
		f.Add(s)
	}
	p := Policy{Dir: "/etc/siteboot/secrets", Deny: []string{"/var/lib/siteboot"}}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := Parse(s); err == nil && r.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, r.String())
		}
		err := p.Check(s)
		if err != nil {
			ours := strings.HasPrefix(s, "env://") || strings.HasPrefix(s, "file://")
			if !ours && len(s) >= 16 && strings.Contains(err.Error(), s) {
				t.Fatalf("Check(%q) echoes it: %v", s, err)
			}
			return
		}
		r, err := Parse(s)
		if err != nil {
			t.Fatalf("Check accepts %q, which Parse refuses: %v", s, err)
		}
		switch r.Scheme {
		case SchemeEnv:
			if !strings.HasPrefix(r.Name, DefaultEnvPrefix) || len(r.Name) == len(DefaultEnvPrefix) || !validEnvName(r.Name) {
				t.Fatalf("Check accepts env name %q", r.Name)
			}
		case SchemeFile:
			if filepath.Clean(r.Name) != r.Name || !strings.HasPrefix(r.Name, p.Dir+"/") || r.Name == p.Dir+"/" ||
				strings.Contains(r.Name, "\x00") || strings.HasPrefix(r.Name, "/var/lib/siteboot/") {
				t.Fatalf("Check accepts path %q", r.Name)
			}
			for _, part := range strings.Split(strings.TrimPrefix(r.Name, p.Dir+"/"), "/") {
				if part == "" || part == "." || part == ".." {
					t.Fatalf("Check accepts path %q with component %q", r.Name, part)
				}
			}
		default:
			t.Fatalf("Check accepts scheme %q", r.Scheme)
		}
	})
}
