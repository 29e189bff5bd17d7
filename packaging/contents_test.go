package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The .deb's files are root's and world-readable whatever the builder's
// umask: the siteboot user reads /etc/siteboot/siteboot.yaml, everyone reads
// the man pages and completions, and the same tree gives the same package.
func TestDebContentsModes(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, tool+" is not installed")
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "siteboot")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/siteboot")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("sh", "-c", `umask 077 && exec ./deb/build "$@"`, "build", bin, "0.0.1~modes", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("deb/build under umask 077: %v\n%s", err, out)
	}
	list, err := exec.Command("dpkg-deb", "-c", strings.TrimSpace(string(out))).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb -c: %v\n%s", err, list)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		mode, owner, name := f[0], f[1], f[5]
		want := "-rw-r--r--"
		switch {
		case strings.HasSuffix(name, "/"):
			want = "drwxr-xr-x"
		case name == "./usr/bin/siteboot":
			want = "-rwxr-xr-x"
		}
		if mode != want || owner != "root/root" {
			t.Errorf("%s is %s %s; want %s root/root", name, mode, owner, want)
		}
	}
}
