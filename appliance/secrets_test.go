package appliance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siteboot/siteboot/secretref"
	"golang.org/x/sys/unix"
)

// TestSecretPolicyDeniesTheNodeKeyMountedElsewhere: the node key
// bind-mounted as a file into secrets.dir is still never a secret: the
// policy denies the key itself, not only the directory that holds it.
func TestSecretPolicyDeniesTheNodeKeyMountedElsewhere(t *testing.T) {
	tmp := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Secrets.Dir, cfg.NodeID = filepath.Join(tmp, "data"), filepath.Join(tmp, "secrets"), "n1"
	for _, d := range []string{cfg.DataDir, cfg.Secrets.Dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key, token := filepath.Join(cfg.DataDir, "node.key"), filepath.Join(cfg.Secrets.Dir, "token")
	for _, f := range []string{key, token} {
		if err := os.WriteFile(f, []byte("k"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(key, token, "", unix.MS_BIND, ""); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("bind mounts need root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(token, unix.MNT_DETACH) })
	r := secretref.Resolver{Policy: cfg.SecretPolicy()}
	got, err := r.Resolve(context.Background(), "file://"+token)
	if err == nil || !strings.Contains(err.Error(), "never resolvable") {
		t.Fatalf("Resolve(the node key mounted as a token) = %d bytes, %v; want refused", len(got), err)
	}
}
