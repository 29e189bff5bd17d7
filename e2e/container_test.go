package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/netlab"
)

// containerBootFile is a boot file the image must carry from Debian's ipxe.
const containerBootFile = "/usr/lib/ipxe/undionly.kpxe"

// containerLabel marks the containers this test runs, with the network
// namespace each joins, so a later run removes one a killed run left.
const containerLabel = "siteboot.e2e.netns"

// TestContainerBoot: the image `make container` builds, loaded back from
// its docker archive, runs under podman in the boot host's network
// namespace (host networking there) with only CAP_NET_BIND_SERVICE and
// CAP_NET_RAW, its state on a mounted volume and its config a mounted
// file. It becomes healthy (its HEALTHCHECK, `siteboot healthcheck`),
// serves the image's iPXE first stage over TFTP, takes an entry from the
// host's CLI through the admin socket on the volume, and a SeaBIOS VM
// PXE-boots from it to its script and ramdisk.
func TestContainerBoot(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(netlab.BIOS), netlab.Needs{
		Binaries: []string{"podman", "runc", "make", "git", "curl"},
		Files:    []string{lkrnFile, containerBootFile},
	})
	removeStaleContainers(t)
	img := buildContainerImage(t)
	kernel, err := os.ReadFile(lkrnFile)
	if err != nil {
		t.Fatal(err)
	}
	initrd := bytes.Repeat([]byte("siteboot container initrd\n"), 512)
	b := newBootLabWith(t, map[string][]byte{kernelPath: kernel, initrdPath: initrd}, img.start)
	ctx, cancel := context.WithTimeout(b.lab.Context(), vmTimeout)
	defer cancel()
	img.checkHealthy(ctx, t, b.app)
	img.checkConfinement(t, b.app)
	for _, tc := range bootCases() {
		if tc.fw == netlab.BIOS {
			bootWithEntry(t, b, tc)
		}
	}
	// After the boot, whose checks count siteboot's TFTP transfers.
	checkTFTPBootFile(ctx, t, b.app)
}

// containerImage is an image built for one test run.
type containerImage struct {
	image string
	// cli is the static binary built with it, used as the host's CLI.
	cli string
	// names are the containers started from it, by appliance.
	names map[*appliance]string
}

// buildContainerImage runs `make container` into a scratch dist directory
// with a tag of its own, removes the image and loads it back from the
// docker archive, so the test runs what is shipped. The image is removed
// when the test ends.
func buildContainerImage(t *testing.T) *containerImage {
	t.Helper()
	tag := "e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c := &containerImage{image: "localhost/siteboot-e2e:" + tag, names: map[*appliance]string{}}
	dist := t.TempDir()
	t.Cleanup(func() { podman(context.Background(), t, "rmi", "--force", "--ignore", c.image) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	mk := exec.CommandContext(ctx, "make", "-C", "..", "container", "DIST="+dist, "VERSION="+tag, "CONTAINER_IMAGE="+c.image)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make container: %v\n%s", err, out)
	}
	t.Logf("make container: %s", time.Since(start).Round(100*time.Millisecond))
	archive := filepath.Join(dist, "siteboot-"+tag)
	checkOCIArchive(t, archive+".oci.tar", c.image)
	if _, err := podman(ctx, t, "rmi", c.image); err != nil {
		t.Fatal(err)
	}
	if _, err := podman(ctx, t, "load", "--quiet", "--input", archive+".docker.tar"); err != nil {
		t.Fatal(err)
	}
	c.cli = filepath.Join(dist, "siteboot")
	return c
}

// checkOCIArchive: the OCI archive is an OCI image layout naming image.
func checkOCIArchive(t *testing.T, path, image string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no index.json: %v", path, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				MediaType   string            `json:"mediaType"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			t.Fatalf("%s: index.json: %v", path, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].MediaType != "application/vnd.oci.image.manifest.v1+json" ||
			index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != image {
			t.Fatalf("%s: index.json = %+v; want one OCI manifest named %s", path, index, image)
		}
		return
	}
}

// start runs the image on h as the README's command does, the lab's
// config mounted over the image's, and waits until siteboot is ready.
func (c *containerImage) start(t *testing.T, h *netlab.Host, cfg applianceConfig) *appliance {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "siteboot.yaml")
	if err := os.Mkdir(data, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(applianceYAML(h, cfg, "/var/lib/siteboot")), 0o644); err != nil {
		t.Fatal(err)
	}
	netns := "/run/netns/" + h.NS()
	name := "siteboot-e2e-" + h.NS()
	addr := h.Addr().String()
	a := &appliance{
		t: t, bin: c.cli, host: h, socket: filepath.Join(data, "siteboot.sock"),
		base: fmt.Sprintf("http://%s:%d", addr, httpPort),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true, DialContext: dialIn(h),
		}},
	}
	c.names[a] = name
	run := []string{"run", "--rm", "--name", name, "--label", containerLabel + "=" + netns,
		// The README's command, with the network namespace of h as "host".
		"--network", "ns:" + netns,
		"--cap-drop", "all", "--cap-add", "NET_BIND_SERVICE", "--cap-add", "NET_RAW",
		"--security-opt", "no-new-privileges", "--read-only",
		"-v", data + ":/var/lib/siteboot", "-v", conf + ":/etc/siteboot/siteboot.yaml:ro",
		// The note's settings for these machines (no CAP_SYS_RESOURCE on the host).
		"--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
		c.image}
	a.out = startLogged(t, filepath.Join(h.Lab().Dir(), "container.log"), "podman", run...)
	t.Cleanup(func() { podman(context.Background(), t, "rm", "--force", "--time", "10", "--ignore", name) })
	ctx, cancel := context.WithTimeout(h.Lab().Context(), 60*time.Second)
	defer cancel()
	if _, err := a.out.wait(ctx, msgReady); err != nil {
		t.Fatalf("siteboot in the container did not become ready: %v\n%s", err, a.output())
	}
	return a
}

// checkHealthy: the image's HEALTHCHECK passes once siteboot is ready.
func (c *containerImage) checkHealthy(ctx context.Context, t *testing.T, a *appliance) {
	t.Helper()
	// Exit status 0 is healthy (podman 4.3 prints nothing then).
	if out, err := podman(ctx, t, "healthcheck", "run", c.names[a]); err != nil {
		t.Fatalf("podman healthcheck run: %v\n%s", err, out)
	}
	state, err := podman(ctx, t, "inspect", "--format", "{{.State.Healthcheck.Status}} {{len .State.Healthcheck.Log}}", c.names[a])
	if err != nil || strings.TrimSpace(state) != "healthy 1" {
		t.Errorf("health status and checks run = %q, %v; want healthy after 1", state, err)
	}
	// The README's last step: the CLI inside the container finds the socket.
	out, err := podman(ctx, t, "exec", c.names[a], "siteboot", "status")
	if err != nil || !strings.Contains(out, "site") || !strings.Contains(out, "e2e") {
		t.Errorf("podman exec … siteboot status = %q, %v; want the status of site e2e", out, err)
	}
}

// checkConfinement: as the kernel sees it, the container's siteboot has
// exactly CAP_NET_BIND_SERVICE and CAP_NET_RAW, no new privileges, and the
// boot host's network namespace.
func (c *containerImage) checkConfinement(t *testing.T, a *appliance) {
	t.Helper()
	pid, err := podman(context.Background(), t, "inspect", "--format", "{{.State.Pid}}", c.names[a])
	if err != nil {
		t.Fatal(err)
	}
	pid = strings.TrimSpace(pid)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	const want = 1<<10 | 1<<13 // CAP_NET_BIND_SERVICE, CAP_NET_RAW
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if v, err := strconv.ParseUint(fields[set], 16, 64); err != nil || v != want {
			t.Errorf("%s of the container's siteboot (pid %s) = %s; want %016x", set, pid, fields[set], want)
		}
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q; want 1", fields["NoNewPrivs"])
	}
	var got, lab syscall.Stat_t
	errA := syscall.Stat("/proc/"+pid+"/ns/net", &got)
	errB := syscall.Stat("/run/netns/"+a.host.NS(), &lab)
	if err := errors.Join(errA, errB); err != nil || got.Ino != lab.Ino {
		t.Errorf("the container's network namespace is not the boot host's (inode %d, want %d): %v", got.Ino, lab.Ino, err)
	}
}

// checkTFTPBootFile: the image's copy of Debian's BIOS first stage is
// what siteboot serves over TFTP.
func checkTFTPBootFile(ctx context.Context, t *testing.T, a *appliance) {
	t.Helper()
	want, err := os.ReadFile(containerBootFile)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "undionly.kpxe")
	url := "tftp://" + a.host.Addr().String() + "/undionly.kpxe"
	if out, err := a.host.Run(ctx, "curl", "-sS", "--max-time", "20", "-o", dst, url); err != nil {
		t.Fatalf("curl %s: %v\n%s", url, err, out)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("TFTP undionly.kpxe from the container: %d bytes, %v; want the %d bytes of %s", len(got), err, len(want), containerBootFile)
	}
}

// staleImageAge is how old an e2e image tag must be before a later run
// removes it: older than any run's budget, so a concurrent run keeps its own.
const staleImageAge = time.Hour

// removeStaleContainers removes containers a killed run of this test
// left, those whose lab namespace is gone, and the images such runs left.
// Stale lab namespaces go first (netlab), so a killed run's container is
// removed by the next run rather than the one after.
func removeStaleContainers(t *testing.T) {
	t.Helper()
	if removed, err := netlab.CleanupStale(); err != nil {
		t.Logf("netlab: cleaning stale labs: %v", err)
	} else if len(removed) > 0 {
		t.Logf("netlab: removed stale namespaces %v", removed)
	}
	defer removeStaleImages(t)
	out, err := podman(context.Background(), t, "ps", "--all", "--filter", "label="+containerLabel,
		"--format", `{{.Names}} {{index .Labels "`+containerLabel+`"}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, netns, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if _, err := os.Stat(netns); errors.Is(err, os.ErrNotExist) {
			t.Logf("removing container %s left by an earlier run (%s is gone)", name, netns)
			podman(context.Background(), t, "rm", "--force", "--time", "0", name)
		}
	}
}

// removeStaleImages removes localhost/siteboot-e2e images whose tag
// (buildContainerImage's, the build time in base 36) is older than
// staleImageAge; one a container still uses is kept (rmi without --force).
func removeStaleImages(t *testing.T) {
	t.Helper()
	out, err := podman(context.Background(), t, "images", "--filter", "reference=localhost/siteboot-e2e",
		"--format", "{{.Repository}}:{{.Tag}}")
	if err != nil {
		return
	}
	for _, ref := range strings.Fields(out) {
		_, tag, _ := strings.Cut(ref, ":")
		ns, err := strconv.ParseInt(strings.TrimPrefix(tag, "e2e-"), 36, 64)
		if !strings.HasPrefix(tag, "e2e-") || err != nil || time.Since(time.Unix(0, ns)) < staleImageAge {
			continue
		}
		t.Logf("removing image %s left by an earlier run", ref)
		podman(context.Background(), t, "rmi", ref)
	}
}

// podman runs a podman command and returns its stdout; a failure is logged
// and returned.
func podman(ctx context.Context, t *testing.T, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		t.Log(err)
	}
	return string(out), err
}

// logged is a command started in the test's own namespaces, its stdout
// and stderr going to a file.
type logged struct {
	path string
	done chan struct{}
}

// startLogged starts name with args, output to path; the test's cleanup
// kills it if it still runs by then.
func startLogged(t *testing.T, path, name string, args ...string) *logged {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &logged{path: path, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(l.done)
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-l.done
		}
		if t.Failed() {
			t.Logf("%s (last 4 KiB):\n%s", filepath.Base(path), lastBytes(l.output(), 4096))
		}
	})
	return l
}

func (l *logged) output() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// wait waits until the output holds substr; it fails when ctx ends or the
// command exits first.
func (l *logged) wait(ctx context.Context, substr string) (string, error) {
	for {
		if out := l.output(); strings.Contains(out, substr) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-l.done:
			if out := l.output(); strings.Contains(out, substr) {
				return out, nil
			}
			return "", errors.New("the command exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
