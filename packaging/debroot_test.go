package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The Debian root the package test installs into: Debian 12, minbase, plus
// the package's dependency ipxe. debootstrap takes about a minute, so it
// runs once per cache directory and each test works on a copy.
const (
	rootSuite    = "bookworm"
	rootIncludes = "ipxe"
)

// cacheDir is $SITEBOOT_CACHE, or siteboot/ in the user's cache directory;
// CI keeps it for the whole run.
func cacheDir(t *testing.T) string {
	if d := os.Getenv("SITEBOOT_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache directory (set SITEBOOT_CACHE): %v", err)
	}
	return filepath.Join(d, "siteboot")
}

// cachedRoot copies the cached Debian root to dst, making it first if the
// cache has none. A lock file serialises test binaries sharing the cache;
// the root appears under its name only once debootstrap has finished.
func cachedRoot(t *testing.T, dst string) {
	t.Helper()
	base := filepath.Join(cacheDir(t), "debootstrap")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, rootSuite+"-minbase-"+rootIncludes)
	lock, err := os.OpenFile(root+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); os.IsNotExist(err) {
		debootstrap(t, root)
	}
	start := time.Now()
	if out, err := exec.Command("cp", "-a", "--reflink=auto", root, dst).CombinedOutput(); err != nil {
		t.Fatalf("copying the cached Debian root: %v\n%s", err, out)
	}
	t.Logf("Debian root copied from %s in %v", root, time.Since(start).Round(time.Millisecond))
}

func debootstrap(t *testing.T, root string) {
	t.Helper()
	mirror := os.Getenv("SITEBOOT_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	tmp := root + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+rootIncludes,
		rootSuite, tmp, mirror).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("debootstrap %s from %s: %v\n%s", rootSuite, mirror, err, out)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap --variant=minbase %s: %v (cached in %s)", rootSuite, time.Since(start).Round(time.Second), root)
}
