package secretref

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// secretTree is a secrets dir beside a data dir holding a node key, with
// every kind of thing a ref could be pointed at to escape or block.
type secretTree struct {
	dir, data, outside string
	r                  Resolver
}

const (
	fileValue = "s3cret-file"
	envValue  = "s3cret-env"
	keyValue  = "s3cret-node-key"
)

func newSecretTree(t *testing.T) *secretTree {
	t.Helper()
	tmp := t.TempDir()
	st := &secretTree{dir: filepath.Join(tmp, "secrets"), data: filepath.Join(tmp, "data"), outside: filepath.Join(tmp, "outside")}
	for _, d := range []string{st.dir, filepath.Join(st.dir, "sub"), st.data, st.outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, data []byte) {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(st.dir, "token"), []byte(fileValue+"\n"))
	write(filepath.Join(st.dir, "sub", "token"), []byte(fileValue))
	write(filepath.Join(st.dir, "big"), make([]byte, MaxSize+1))
	write(filepath.Join(st.data, "node.key"), []byte(keyValue))
	write(filepath.Join(st.outside, "secret"), []byte(keyValue))
	links := map[string]string{
		"link-out":   filepath.Join(st.data, "node.key"),
		"link-in":    filepath.Join(st.dir, "token"),
		"link-rel":   "../data/node.key",
		"link-dir":   st.outside,
		"link-shdw":  "/etc/shadow",
		"link-proc":  "/proc/self/root/etc/shadow",
		"link-loopy": "link-loopy",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(st.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(st.data, "node.key"), filepath.Join(st.dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(st.dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A character device with /dev/zero's numbers: read, it never ends.
	if err := syscall.Mknod(filepath.Join(st.dir, "zero"), syscall.S_IFCHR|0o600, 1<<8|5); err != nil {
		t.Fatalf("mknod (the tests run as root): %v", err)
	}
	env := map[string]string{"SITEBOOT_SECRET_T": envValue, "PATH": "/usr/bin"}
	st.r = Resolver{
		Policy:    Policy{Dir: st.dir, Deny: []string{st.data}},
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}
	return st
}

// resolveFunc resolves with openat2 (Resolve) or with the O_NOFOLLOW walk
// that stands in for it on kernels without openat2.
type resolveFunc func(ctx context.Context, r Resolver, ref string) ([]byte, error)

var openModes = map[string]resolveFunc{
	"openat2": func(ctx context.Context, r Resolver, ref string) ([]byte, error) { return r.Resolve(ctx, ref) },
	"walk": func(ctx context.Context, r Resolver, ref string) ([]byte, error) {
		p, err := r.Policy.check(ref)
		if err != nil || p.Scheme == SchemeEnv {
			return r.Resolve(ctx, ref)
		}
		b, err := readFile(ctx, r.Policy.withDefaults(), p, true)
		if err != nil {
			return nil, errors.New("secret ref " + ref + ": " + err.Error())
		}
		return b, nil
	},
}

func TestResolve(t *testing.T) {
	st := newSecretTree(t)
	tests := []struct {
		name, ref, want, wantErr string
	}{
		{name: "env", ref: "env://SITEBOOT_SECRET_T", want: envValue},
		{name: "file, one newline dropped", ref: "file://" + st.dir + "/token", want: fileValue},
		{name: "file in a subdirectory", ref: "file://" + st.dir + "/sub/token", want: fileValue},
		{name: "env unset", ref: "env://SITEBOOT_SECRET_MISSING", wantErr: "variable not set"},
		{name: "env outside the prefix", ref: "env://PATH", wantErr: "does not start with secrets.env_prefix"},
		{name: "missing file", ref: "file://" + st.dir + "/nope", wantErr: "no such file"},
		{name: "node key", ref: "file://" + st.data + "/node.key", wantErr: "is not beneath secrets.dir"},
		{name: "etc shadow", ref: "file:///etc/shadow", wantErr: "is not beneath secrets.dir"},
		{name: "dotdot", ref: "file://" + st.dir + "/../data/node.key", wantErr: "is not clean"},
		{name: "symlink out", ref: "file://" + st.dir + "/link-out", wantErr: "a symlink is in the path"},
		{name: "relative symlink out", ref: "file://" + st.dir + "/link-rel", wantErr: "a symlink is in the path"},
		{name: "symlink to shadow", ref: "file://" + st.dir + "/link-shdw", wantErr: "a symlink is in the path"},
		{name: "magic link", ref: "file://" + st.dir + "/link-proc", wantErr: "a symlink is in the path"},
		{name: "symlink within the dir", ref: "file://" + st.dir + "/link-in", wantErr: "a symlink is in the path"},
		{name: "symlinked directory", ref: "file://" + st.dir + "/link-dir/secret", wantErr: "a symlink is in the path"},
		{name: "symlink loop", ref: "file://" + st.dir + "/link-loopy", wantErr: "a symlink is in the path"},
		{name: "hard link to the node key", ref: "file://" + st.dir + "/hardlink", wantErr: "2 hard links"},
		{name: "fifo", ref: "file://" + st.dir + "/fifo", wantErr: "not a regular file (it is a FIFO)"},
		{name: "device", ref: "file://" + st.dir + "/zero", wantErr: "not a regular file (it is a character device)"},
		{name: "directory", ref: "file://" + st.dir + "/sub", wantErr: "not a regular file (it is a directory)"},
		{name: "oversized", ref: "file://" + st.dir + "/big", wantErr: "more than 65536"},
		{name: "not a ref", ref: "plaintext", wantErr: "secret ref must be"},
	}
	for mode, resolve := range openModes {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				got, err := resolve(context.Background(), st.r, tc.ref)
				if tc.wantErr == "" {
					if err != nil || string(got) != tc.want {
						t.Fatalf("Resolve(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					// The length only: a value read by mistake may be a real secret.
					t.Fatalf("Resolve(%q) = %d bytes, %v; want an error containing %q", tc.ref, len(got), err, tc.wantErr)
				}
				if tc.ref != "plaintext" && !strings.Contains(err.Error(), tc.ref) {
					t.Errorf("error %q does not name the ref", err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error leaks a secret: %v", err)
				}
			})
		}
	}
}

// TestResolveDirSymlinkedIntoDataDir: a secrets dir that turns out, through
// a symlink, to lie in the data dir yields nothing from it.
func TestResolveDirSymlinkedIntoDataDir(t *testing.T) {
	st := newSecretTree(t)
	alias := filepath.Join(filepath.Dir(st.dir), "alias")
	if err := os.Symlink(st.data, alias); err != nil {
		t.Fatal(err)
	}
	r := Resolver{Policy: Policy{Dir: alias, Deny: []string{st.data}}}
	if err := r.Policy.Validate(); err == nil {
		t.Error("Validate accepts a secrets dir that is the data dir through a symlink")
	}
	for mode, resolve := range openModes {
		got, err := resolve(context.Background(), r, "file://"+alias+"/node.key")
		if err == nil || !strings.Contains(err.Error(), "never resolvable") {
			t.Errorf("%s: Resolve = %d bytes, %v; want refused as inside the data dir", mode, len(got), err)
		}
	}
}

func TestResolveHonoursContext(t *testing.T) {
	st := newSecretTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ref := range []string{"file://" + st.dir + "/token", "env://SITEBOOT_SECRET_T"} {
		if _, err := st.r.Resolve(ctx, ref); !errors.Is(err, context.Canceled) {
			t.Errorf("Resolve(%q) with a cancelled context = %v", ref, err)
		}
	}
}

// TestResolveFIFODoesNotBlock: 50 resolves of a FIFO (no writer) each
// return at once with an error and leave no goroutine or fd behind.
func TestResolveFIFODoesNotBlock(t *testing.T) {
	st := newSecretTree(t)
	ref := "file://" + st.dir + "/fifo"
	fds0, g0 := openFDs(t), runtime.NumGoroutine()
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		done := make(chan error, 1)
		go func() { _, err := st.r.Resolve(ctx, ref); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "FIFO") {
				t.Fatalf("resolve %d: %v, want a FIFO refusal", i, err)
			}
		case <-time.After(time.Second):
			cancel()
			t.Fatalf("resolve %d of a FIFO still blocks after 1 s", i)
		}
		cancel()
	}
	// The resolving goroutines have sent their result and are ending.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Errorf("goroutines %d → %d after 50 FIFO resolves", g0, g)
	}
	if fds := openFDs(t); fds > fds0 {
		t.Errorf("open fds %d → %d after 50 FIFO resolves", fds0, fds)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
