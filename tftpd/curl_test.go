package tftpd

import (
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// curlPath returns curl's path, skipping (or failing when
// SITEBOOT_E2E=require) without it.
func curlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("SITEBOOT_E2E") == "require" {
			t.Fatal("SITEBOOT_E2E=require: curl is not installed")
		}
		t.Skip("curl is not installed")
	}
	return p
}

// curlGet fetches url with curl into a temp file and returns its digest.
func curlGet(t *testing.T, curl, url string, args ...string) ([32]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.CommandContext(ctx, curl, append([]string{"-sS", "--fail", "-o", out}, append(args, url)...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return [32]byte{}, &curlError{err: err, out: string(b)}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

type curlError struct {
	err error
	out string
}

func (e *curlError) Error() string { return e.err.Error() + ": " + e.out }

// TestCurlFetches uses curl as an independent TFTP client.
func TestCurlFetches(t *testing.T) {
	curl := curlPath(t)
	fx := start(t, Config{})
	tests := []struct {
		name string
		path string
		file string
		args []string
	}{
		{"curl defaults (blksize 512, tsize)", "ipxe.efi", "ipxe.efi", nil},
		{"blksize 1468", "ipxe.efi", "ipxe.efi", []string{"--tftp-blksize", "1468"}},
		{"blksize 8192 clamped", "undionly.kpxe", "undionly.kpxe", []string{"--tftp-blksize", "8192"}},
		{"no options", "exact.bin", "exact.bin", []string{"--tftp-no-options"}},
		{"subdirectory", "arm64-efi/snponly.efi", "arm64-efi/snponly.efi", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := curlGet(t, curl, "tftp://"+fx.addr+"/"+tc.path, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sha256.Sum256(testFiles[tc.file]), got); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := curlGet(t, curl, "tftp://"+fx.addr+"/missing.efi"); err == nil {
		t.Error("curl fetched a file that is not in the set")
	}
}

// TestCurlConcurrent runs 50 curl fetches at once, as the benchmark
// against dnsmasq does, and checks every copy.
func TestCurlConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 50 curl processes")
	}
	curl := curlPath(t)
	fx := start(t, Config{})
	want := sha256.Sum256(testFiles["ipxe.efi"])
	const n = 50
	got, errs := make([][32]byte, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = curlGet(t, curl, "tftp://"+fx.addr+"/ipxe.efi", "--tftp-blksize", "1468")
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("fetch %d: %v", i, errs[i])
		} else if got[i] != want {
			t.Errorf("fetch %d: wrong content", i)
		}
	}
}
