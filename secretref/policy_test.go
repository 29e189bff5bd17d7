package secretref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	p := Policy{Dir: "/etc/siteboot/secrets", Deny: []string{"/var/lib/siteboot"}}
	tests := []struct {
		name, ref string
		want      string // substring of the error, "" for none
	}{
		{"file beneath dir", "file:///etc/siteboot/secrets/bc-token", ""},
		{"file deeper", "file:///etc/siteboot/secrets/site-a/bc-token", ""},
		{"env with prefix", "env://SITEBOOT_SECRET_BC_TOKEN", ""},
		{"node key", "file:///var/lib/siteboot/node.key", `"file:///var/lib/siteboot/node.key" refused: /var/lib/siteboot/node.key is not beneath secrets.dir /etc/siteboot/secrets`},
		{"shadow", "file:///etc/shadow", `"file:///etc/shadow" refused: /etc/shadow is not beneath secrets.dir`},
		{"the dir itself", "file:///etc/siteboot/secrets", "is not beneath secrets.dir"},
		{"sibling with the dir as prefix", "file:///etc/siteboot/secrets2/x", "is not beneath secrets.dir"},
		{"dotdot", "file:///etc/siteboot/secrets/../siteboot.key", "is not clean"},
		{"PATH", "env://PATH", `"env://PATH" refused: variable PATH does not start with secrets.env_prefix SITEBOOT_SECRET_`},
		{"prefix alone", "env://SITEBOOT_SECRET_", "does not start with secrets.env_prefix"},
		{"prefix case", "env://siteboot_secret_X", "does not start with secrets.env_prefix"},
		{"unknown scheme", "vault://x", `scheme "vault" unknown`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errString(p.Check(tc.ref))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Check(%q) = %q, want %q", tc.ref, got, tc.want)
			}
		})
	}
}

// TestPolicyCheckDoesNotEchoAValue: a secret pasted where a ref belongs
// is not repeated in the error.
func TestPolicyCheckDoesNotEchoAValue(t *testing.T) {
	for _, v := range []string{"hunter2-plain-token", "hunter2:/x", strings.Repeat("hunter2", 200) + "://"} {
		err := Policy{}.Check(v)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Check(%.20q…) = %v, want an error that does not repeat it", v, err)
		}
	}
}

func TestPolicyDefaults(t *testing.T) {
	var p Policy
	if err := p.Check("file:///etc/siteboot/secrets/t"); err != nil {
		t.Errorf("default dir: %v", err)
	}
	if err := p.Check("env://SITEBOOT_SECRET_T"); err != nil {
		t.Errorf("default prefix: %v", err)
	}
	if err := p.Check("file:///tmp/t"); err == nil {
		t.Error("the zero policy allows file:///tmp/t")
	}
}

func TestPolicyValidate(t *testing.T) {
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	if err := os.MkdirAll(filepath.Join(data, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(data, "raft"), filepath.Join(tmp, "innocent")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		p     Policy
		field string // PolicyError.Field, "" for no error
		want  string
	}{
		{"default", Policy{Deny: []string{"/var/lib/siteboot"}}, "", ""},
		{"dir apart", Policy{Dir: filepath.Join(tmp, "secrets"), Deny: []string{data}}, "", ""},
		{"relative dir", Policy{Dir: "secrets"}, "dir", "absolute, clean"},
		{"unclean dir", Policy{Dir: "/etc/x/../y"}, "dir", "absolute, clean"},
		{"root dir", Policy{Dir: "/"}, "dir", "other than /"},
		{"dir is the data dir", Policy{Dir: data, Deny: []string{data}}, "dir", "overlaps"},
		{"dir inside the data dir", Policy{Dir: filepath.Join(data, "secrets"), Deny: []string{data}}, "dir", "overlaps"},
		{"dir contains the data dir", Policy{Dir: tmp, Deny: []string{data}}, "dir", "overlaps"},
		{"dir symlinked into the data dir", Policy{Dir: filepath.Join(tmp, "innocent", "secrets"), Deny: []string{data}}, "dir", "resolves to"},
		{"data dir unclean but same", Policy{Dir: data, Deny: []string{data + "/"}}, "dir", "overlaps"},
		{"bad prefix", Policy{EnvPrefix: "A-B"}, "env_prefix", "variable name prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			var pe *PolicyError
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !asPolicyError(err, &pe) || pe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want a %s error containing %q", err, tc.field, tc.want)
			}
		})
	}
}

func asPolicyError(err error, pe **PolicyError) bool {
	p, ok := err.(*PolicyError)
	*pe = p
	return ok
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
