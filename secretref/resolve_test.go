package secretref

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("s3cret-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxSecret+1), 0o600); err != nil {
		t.Fatal(err)
	}
	r := Resolver{LookupEnv: func(k string) (string, bool) {
		if k == "BC_TOKEN" {
			return "s3cret-env", true
		}
		return "", false
	}}
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "env://BC_TOKEN", want: "s3cret-env"},
		{ref: "file://" + file, want: "s3cret-file"},
		{ref: "env://MISSING", wantErr: "env://MISSING: variable not set"},
		{ref: "file://" + filepath.Join(dir, "nope"), wantErr: "no such file"},
		{ref: "file://" + big, wantErr: "larger than"},
		{ref: "nope", wantErr: "secret ref must be"},
	}
	for _, tt := range tests {
		got, err := r.Resolve(context.Background(), tt.ref)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Resolve(%q) error = %v, want containing %q", tt.ref, err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Resolve(%q) error leaks the secret: %v", tt.ref, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}
