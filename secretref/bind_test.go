package secretref

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// bindMount mounts src at dst (created as a directory or an empty file to
// match src) until the test ends.
func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		err = os.Mkdir(dst, 0o700)
	} else {
		err = os.WriteFile(dst, nil, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("bind mounts need root: %v", err)
		}
		t.Fatalf("bind mount %s at %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

// TestResolveThroughBindMount: the data dir (or its parent, or a denied
// file) bind-mounted beneath the secrets dir is still never resolvable: a
// bind mount is no symlink and has no second link, so only the identity of
// what is opened gives it away.
func TestResolveThroughBindMount(t *testing.T) {
	st := newSecretTree(t)
	tls := filepath.Join(st.outside, "tls.key")
	if err := os.WriteFile(tls, []byte(keyValue), 0o600); err != nil {
		t.Fatal(err)
	}
	// The tree's node.key has a second link; this one has none.
	if err := os.WriteFile(filepath.Join(st.data, "one.key"), []byte(keyValue), 0o600); err != nil {
		t.Fatal(err)
	}
	st.r.Policy.Deny = append(st.r.Policy.Deny, tls)
	bindMount(t, st.data, filepath.Join(st.dir, "bind-data"))
	bindMount(t, filepath.Dir(st.data), filepath.Join(st.dir, "bind-parent"))
	bindMount(t, tls, filepath.Join(st.dir, "bind-tls"))
	refs := []string{
		"file://" + st.dir + "/bind-data/one.key",
		"file://" + st.dir + "/bind-parent/data/one.key",
		"file://" + st.dir + "/bind-tls",
	}
	for mode, resolve := range openModes {
		for _, ref := range refs {
			got, err := resolve(context.Background(), st.r, ref)
			if err == nil || !strings.Contains(err.Error(), "never resolvable") {
				t.Errorf("%s: Resolve(%q) = %d bytes, %v; want refused as a denied path", mode, ref, len(got), err)
			}
		}
	}
	// The secrets dir itself a bind mount of the data dir: refused at start.
	alias := filepath.Join(st.outside, "alias")
	bindMount(t, st.data, alias)
	if err := (Policy{Dir: alias, Deny: []string{st.data}}).Validate(); err == nil {
		t.Error("Validate accepts a secrets dir that is the data dir bind-mounted")
	}
}
