package packaging

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debian is a Debian root made by debootstrap, for dpkg to install into.
type debian struct {
	dir string
}

// command runs a command in the root with /proc mounted, in a mount namespace
// of its own, so nothing stays mounted when it ends.
func (d *debian) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	script := `mount -t proc proc "$0/proc" && exec chroot "$0" "$@"`
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, d.dir}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}, env...)
	cmd.Stdin = nil
	return cmd
}

func (d *debian) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := d.command(ctx, nil, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in the Debian root: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (d *debian) fails(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := d.command(ctx, nil, args...).CombinedOutput()
	if err == nil {
		t.Fatalf("in the Debian root: %s succeeded; want a failure\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

func (d *debian) path(p string) string { return filepath.Join(d.dir, p) }

// requireTools skips (or, with SITEBOOT_E2E=require, fails) when this
// machine cannot run the package test.
func requireTools(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the package test builds a Debian root")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "the package test needs root (debootstrap, chroot, dpkg in the root)")
	}
	for _, tool := range []string{"debootstrap", "dpkg-deb", "unshare", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, tool+" is not installed (make deps installs debootstrap)")
		}
	}
}

// buildDeb builds the package for version with packaging/deb/build from a
// static binary that reports binVersion.
func buildDeb(t *testing.T, dir, version, binVersion string) string {
	t.Helper()
	bin := filepath.Join(dir, "siteboot-"+binVersion)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+binVersion+" -X main.commit=test",
		"-o", bin, "../cmd/siteboot")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("./deb/build", bin, version, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("deb/build: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// serveOnce starts the installed siteboot serve in the root as the siteboot
// user with the packaged config (no DHCP, no TFTP, HTTP on loopback: the
// root shares this machine's network), runs f against it, and stops it.
func (d *debian) serveOnce(t *testing.T, f func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := d.command(ctx, []string{"SITEBOOT_DHCP_ENABLED=false", "SITEBOOT_TFTP_LISTEN=", "SITEBOOT_HTTP_LISTEN=127.0.0.1:0", "SITEBOOT_NODE_ID=deb-test"},
		"setpriv", "--reuid", "siteboot", "--regid", "siteboot", "--init-groups", "--",
		"/usr/bin/siteboot", "serve", "--config", "/etc/siteboot/siteboot.yaml")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		switch err := cmd.Wait(); {
		case err != nil:
			t.Errorf("siteboot serve in the root: %v\n%s", err, logs.String())
		case t.Failed():
			t.Logf("siteboot serve in the root:\n%s", logs.String())
		}
	}()
	// The CLI waits for the socket and for the appliance to be ready.
	d.run(t, "siteboot", "--timeout", "30s", "status")
	f()
}

// The .deb installs in a clean Debian root, its upgrade to a rebuilt
// package keeps the data and an edited conffile, and purge removes it.
func TestDebInstallUpgradePurge(t *testing.T) {
	requireTools(t)
	work := t.TempDir()
	first := buildDeb(t, work, "0.0.1~test1", "test-1")
	second := buildDeb(t, work, "0.0.1~test2", "test-2")
	d := &debian{dir: filepath.Join(work, "root")}
	cachedRoot(t, d.dir)
	for _, deb := range []string{first, second} {
		if out, err := exec.Command("cp", deb, d.path("tmp")).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}

	d.run(t, "dpkg", "-i", "/tmp/"+filepath.Base(first))
	checkInstalled(t, d, "test-1")
	d.serveOnce(t, func() {
		d.run(t, "siteboot", "entry", "add", "--node-id", "n1", "--mac", "52:54:00:de:b0:01")
	})
	conf := d.path("etc/siteboot/siteboot.yaml")
	edited := strings.Replace(readFile(t, conf), "site_id: default", "site_id: upgraded", 1)
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	d.run(t, "dpkg", "-i", "/tmp/"+filepath.Base(second))
	checkInstalled(t, d, "test-2")
	if got := readFile(t, conf); got != edited {
		t.Fatalf("the upgrade replaced the edited conffile:\n%s", got)
	}
	d.serveOnce(t, func() {
		out := d.run(t, "siteboot", "entry", "ls")
		if !strings.Contains(out, "52:54:00:de:b0:01") {
			t.Errorf("after the upgrade, entry ls lacks the entry added before it:\n%s", out)
		}
		if out := d.run(t, "siteboot", "status"); !strings.Contains(out, "upgraded") {
			t.Errorf("after the upgrade, status does not show the edited site_id:\n%s", out)
		}
	})

	d.run(t, "dpkg", "--purge", "siteboot")
	for _, p := range []string{"usr/bin/siteboot", "etc/siteboot", "var/lib/siteboot", "lib/systemd/system/siteboot.service"} {
		if _, err := os.Lstat(d.path(p)); !os.IsNotExist(err) {
			t.Errorf("after purge /%s: %v; want it gone", p, err)
		}
	}
	d.fails(t, "dpkg-query", "-W", "siteboot")
	// The user stays, as Debian leaves system users.
	d.run(t, "getent", "passwd", "siteboot")
}

func checkInstalled(t *testing.T, d *debian, binVersion string) {
	t.Helper()
	if out := d.run(t, "siteboot", "version"); out != fmt.Sprintf("siteboot %s (commit test)\n", binVersion) {
		t.Errorf("installed siteboot version = %q; want %s", out, binVersion)
	}
	user := d.run(t, "getent", "passwd", "siteboot")
	if !strings.HasSuffix(strings.TrimSpace(user), ":/var/lib/siteboot:/usr/sbin/nologin") {
		t.Errorf("siteboot user = %q; want home /var/lib/siteboot, shell nologin", user)
	}
	if out := d.run(t, "stat", "-c", "%U:%G %a", "/var/lib/siteboot"); strings.TrimSpace(out) != "siteboot:siteboot 750" {
		t.Errorf("/var/lib/siteboot is %q; want siteboot:siteboot 750", out)
	}
	if out := d.run(t, "dpkg-query", "-W", "-f", "${Conffiles}", "siteboot"); !strings.Contains(out, "/etc/siteboot/siteboot.yaml") {
		t.Errorf("conffiles = %q; want /etc/siteboot/siteboot.yaml", out)
	}
	for _, p := range []string{"lib/systemd/system/siteboot.service", "usr/lib/sysusers.d/siteboot.conf",
		"usr/share/man/man1/siteboot-serve.1.gz", "usr/share/bash-completion/completions/siteboot",
		"usr/share/zsh/vendor-completions/_siteboot", "usr/share/fish/vendor_completions.d/siteboot.fish"} {
		if _, err := os.Stat(d.path(p)); err != nil {
			t.Errorf("installed /%s: %v", p, err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Purge with /var/lib/siteboot a mount point (the appliance image's data
// disk, any dedicated volume) succeeds: it empties the directory and leaves
// the mount point, where rm -rf of a mounted directory failed the purge.
func TestDebPurgeDataDirMountPoint(t *testing.T) {
	requireTools(t)
	work := t.TempDir()
	deb := buildDeb(t, work, "0.0.1~test1", "test-1")
	d := &debian{dir: filepath.Join(work, "root")}
	cachedRoot(t, d.dir)
	if out, err := exec.Command("cp", deb, d.path("tmp")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	d.run(t, "dpkg", "-i", "/tmp/"+filepath.Base(deb))
	// One private mount namespace for the mount and the purge.
	out := d.run(t, "sh", "-c", `set -e
mount -t tmpfs data /var/lib/siteboot
mkdir /var/lib/siteboot/raft /var/lib/siteboot/.hidden
echo state >/var/lib/siteboot/raft/raft.db
dpkg --purge siteboot
mountpoint -q /var/lib/siteboot || { echo "the mount point went away"; exit 1; }
left=$(ls -A /var/lib/siteboot)
[ -z "$left" ] || { echo "left after purge: $left"; exit 1; }
echo purged`)
	if !strings.Contains(out, "purged") {
		t.Fatalf("purge with a mounted data dir:\n%s", out)
	}
	d.fails(t, "dpkg-query", "-W", "siteboot")
}
