package redact

import (
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	long := "https://h/" + strings.Repeat("p", 100)
	for _, tc := range []struct{ in, want string }{
		{"https://images.example/a.iso", "https://images.example/a.iso"},
		{"https://images.example/a.iso?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIA", "https://images.example/a.iso?…"},
		{"https://user:pass@images.example/a.iso", "https://images.example/a.iso"},
		{"http://h/a#token=s3cr3t", "http://h/a"},
		{"http://h/a?", "http://h/a?…"},
		{"http://h/%zz", "<unparsable url>"},
		{long + "?sig=1", long[:maxClip] + "…?…"},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestURLError(t *testing.T) {
	_, err := url.Parse("http://h/a?sig=s3cr3t\x7f")
	if err == nil || !strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("url.Parse error %v: the test needs one that names the URL", err)
	}
	if got := URLError(err); strings.Contains(got.Error(), "s3cr3t") {
		t.Errorf("URLError = %q, still naming the URL", got)
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got := Clip(strings.Repeat("x", 81)); got != strings.Repeat("x", 80)+"…" {
		t.Errorf("Clip(81 x) = %q", got)
	}
}

// Whatever the URL, URL's answer carries none of its user info, query or
// fragment, and is bounded.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"https://u:p@h/a?sig=s3cr3t#frag", "http://h/a?", "//h/p?q", "h?x=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := URL(raw)
		if len(got) > maxClip+len("…?…") {
			t.Fatalf("URL(%q) = %q: %d bytes", raw, got, len(got))
		}
		u, err := url.Parse(raw)
		if err != nil {
			if got != "<unparsable url>" {
				t.Fatalf("URL(%q) = %q for an unparsable URL", raw, got)
			}
			return
		}
		bare := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
		// The "?…" that marks a dropped query and the "…" of a clip are not
		// part of what was kept ("h/a?h/a?" keeps "h/a", whose "?…" must not
		// count as the query); what was kept is a prefix of the bare URL.
		kept := strings.TrimSuffix(strings.TrimSuffix(got, "?…"), "…")
		if !strings.HasPrefix(bare, kept) {
			t.Fatalf("URL(%q) = %q keeps %q, which is not a prefix of %q", raw, got, kept, bare)
		}
		for _, secret := range []string{u.RawQuery, u.Fragment, u.User.String()} {
			if len(secret) >= 4 && strings.Contains(kept, secret) && !strings.Contains(bare, secret) {
				t.Fatalf("URL(%q) = %q keeps %q", raw, got, secret)
			}
		}
	})
}
