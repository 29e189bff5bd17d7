package atomicfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	slices.Sort(out)
	return out
}

func TestWriteReplaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(string, []byte) error
	}{{"Write", Write}, {"WriteUnsynced", WriteUnsynced}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			for _, data := range []string{"first", "second, longer", "3"} {
				if err := tc.write(path, []byte(data)); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != data {
					t.Fatalf("after writing %q: read %q, %v", data, got, err)
				}
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", fi.Mode().Perm())
			}
			if diff := cmp.Diff([]string{"state.json"}, names(t, dir)); diff != "" {
				t.Errorf("directory (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.Mkdir(path, 0o700); err != nil { // a directory cannot be replaced by a file
		t.Fatal(err)
	}
	if err := Write(path, []byte("x")); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if diff := cmp.Diff([]string{"state.json"}, names(t, dir)); diff != "" {
		t.Errorf("directory after the failed write (-want +got):\n%s", diff)
	}
}

func TestTempAndRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.json")
	// What a crash between Temp and the rename of a Write leaves behind.
	tmp, err := Temp(dir, tempPattern(path), []byte("torn"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tmp); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("temporary file: %v, %v", fi, err)
	}
	for _, keep := range []string{"index.json", ".other-1.tmp", ".index.json-1.bak"} {
		if err := os.WriteFile(filepath.Join(dir, keep), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveLeftovers(path); err != nil {
		t.Fatal(err)
	}
	want := []string{".index.json-1.bak", ".other-1.tmp", "index.json"}
	if diff := cmp.Diff(want, names(t, dir)); diff != "" {
		t.Errorf("after RemoveLeftovers (-want +got):\n%s", diff)
	}
}
