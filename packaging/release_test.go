package packaging

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// cyclonedxGomod returns the pinned cyclonedx-gomod (the Makefile's
// CYCLONEDX_GOMOD_VERSION): $CYCLONEDX_GOMOD, make's .bin/ copy, or one
// installed with go install into the cache directory, once per version.
func cyclonedxGomod(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CYCLONEDX_GOMOD_VERSION := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CYCLONEDX_GOMOD_VERSION")
	}
	want := string(m[1])
	pinned := func(bin string) bool {
		out, err := exec.Command(bin, "version").Output()
		return err == nil && regexp.MustCompile(`(?m)^Version:\s+`+regexp.QuoteMeta(want)+`$`).Match(out)
	}
	if bin := os.Getenv("CYCLONEDX_GOMOD"); bin != "" {
		if !pinned(bin) {
			t.Fatalf("CYCLONEDX_GOMOD=%s is not cyclonedx-gomod %s", bin, want)
		}
		return bin
	}
	if bin, err := filepath.Abs("../.bin/cyclonedx-gomod"); err == nil && pinned(bin) {
		return bin
	}

	dir := filepath.Join(cacheDir(t), "tools", "cyclonedx-gomod-"+want)
	bin := filepath.Join(dir, "cyclonedx-gomod")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if pinned(bin) {
		return bin
	}
	// About a minute on two cores; the bound is for a module proxy that
	// does not answer.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gobin := t.TempDir()
	install := exec.CommandContext(ctx, "go", "install", "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@"+want)
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	start := time.Now()
	if out, err := install.CombinedOutput(); err != nil {
		skipOrFail(t, "cannot install cyclonedx-gomod "+want+": "+err.Error()+"\n"+string(out))
	}
	t.Logf("installed cyclonedx-gomod %s in %v", want, time.Since(start).Round(time.Second))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(gobin, "cyclonedx-gomod"), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// release runs packaging/release on dist and returns its output.
func release(t *testing.T, tool, dist, version, tag, debVersion string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./release", dist, version, tag, debVersion)
	cmd.Env = append(os.Environ(), "CYCLONEDX_GOMOD="+tool, "DEB_ARCH=amd64")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sbom is the part of a CycloneDX document the test reads.
type sbom struct {
	BOMFormat   string `json:"bomFormat"`
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component component `json:"component"`
	} `json:"metadata"`
	Components []component `json:"components"`
}

type component struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Purl    string `json:"purl"`
}

// packaging/release lists exactly this version's artefacts in a
// SHA256SUMS that sha256sum verifies, next to other versions' files, and
// writes an SBOM of the binary under the release version.
func TestRelease(t *testing.T) {
	for _, tool := range []string{"go", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, tool+" is not installed")
		}
	}
	tool := cyclonedxGomod(t)

	// A version as git describe gives it after a tag, with what make
	// derives from it: an image tag and a Debian version.
	const (
		version    = "v1.2.3-rc1-4-gabc1234-dirty"
		tag        = version
		debVersion = "1.2.3~rc1+git4.abc1234+dirty"
	)
	dist := t.TempDir()
	bin := filepath.Join(dist, "siteboot")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version+" -X main.commit=abc1234",
		"-o", bin, "../cmd/siteboot")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	shipped := []string{
		"siteboot_" + debVersion + "_amd64.deb",
		"siteboot-" + tag + ".oci.tar",
		"siteboot-" + tag + ".docker.tar",
		"siteboot-appliance-" + tag + ".qcow2",
	}
	// The raw image of this version, an earlier version's artefacts and
	// release files, and container/build's staging directory.
	left := []string{
		"siteboot-appliance-" + tag + ".raw",
		"siteboot_1.2.2_amd64.deb", "siteboot-v1.2.2.oci.tar", "siteboot-v1.2.2.docker.tar",
		"siteboot-appliance-v1.2.2.qcow2", "siteboot-appliance-v1.2.2.raw", "siteboot-v1.2.2.cdx.json",
		"SHA256SUMS", "container/rootfs/usr/bin/siteboot",
	}
	for _, f := range append(append([]string{}, shipped...), left...) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dist, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dist, f), []byte("stand-in for "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("refuses a missing artefact", func(t *testing.T) {
		qcow2 := filepath.Join(dist, "siteboot-appliance-"+tag+".qcow2")
		if err := os.Rename(qcow2, qcow2+".away"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(qcow2+".away", qcow2)
		out, err := release(t, tool, dist, version, tag, debVersion)
		if err == nil || !strings.Contains(out, qcow2+" is missing") {
			t.Errorf("release without the qcow2: %v, %q; want a failure naming it", err, out)
		}
	})
	t.Run("refuses a binary of another version", func(t *testing.T) {
		// This version's other artefacts, and a binary left from a build
		// of another commit.
		out, err := release(t, tool, dist, "v1.2.4", tag, debVersion)
		if err == nil || !strings.Contains(out, `siteboot reports version "`+version+`", not "v1.2.4"`) {
			t.Errorf("release v1.2.4 of a %s binary: %v, %q; want a failure", version, err, out)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	out, err := release(t, tool, dist, version, tag, debVersion)
	if err != nil {
		t.Fatalf("packaging/release: %v\n%s", err, out)
	}
	t.Logf("packaging/release:\n%s", out)
	sbomFile := "siteboot-" + tag + ".cdx.json"

	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}
	sums, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer sums.Close()
	var listed []string
	for sc := bufio.NewScanner(sums); sc.Scan(); {
		_, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Errorf("SHA256SUMS: line %q is not HASH  NAME", sc.Text())
		}
		listed = append(listed, name)
	}
	want := append([]string{"siteboot", sbomFile}, shipped...)
	sort.Strings(listed)
	sort.Strings(want)
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("SHA256SUMS lists (-want +got):\n%s", diff)
	}
	// Nothing else in dist: no temporary file left behind.
	var files []string
	if err := filepath.WalkDir(dist, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dist, p)
			files = append(files, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantFiles := append(append([]string{}, want...), left...)
	sort.Strings(files)
	sort.Strings(wantFiles)
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("files in dist (-want +got):\n%s", diff)
	}

	data, err := os.ReadFile(filepath.Join(dist, sbomFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc sbom
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", sbomFile, err)
	}
	if doc.BOMFormat != "CycloneDX" || !strings.HasPrefix(doc.SpecVersion, "1.") {
		t.Errorf("%s: bomFormat %q, specVersion %q; want CycloneDX 1.x", sbomFile, doc.BOMFormat, doc.SpecVersion)
	}
	main := doc.Metadata.Component
	if main.Type != "application" || main.Name != "github.com/siteboot/siteboot" || main.Version != version ||
		!strings.Contains(main.Purl, "siteboot@"+version) {
		t.Errorf("%s: main component %+v; want the application github.com/siteboot/siteboot %s", sbomFile, main, version)
	}
	// Every module linked into the binary, at the version linked, and the
	// Go standard library at the toolchain's version.
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, c := range doc.Components {
		have[c.Name] = c.Version
	}
	if have["google.golang.org/grpc"] == "" {
		t.Errorf("%s: no component google.golang.org/grpc", sbomFile)
	}
	if have["std"] != info.GoVersion {
		t.Errorf("%s: std is %q; want %s", sbomFile, have["std"], info.GoVersion)
	}
	for _, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		if have[dep.Path] != dep.Version {
			t.Errorf("%s: %s is %q; the binary links %s", sbomFile, dep.Path, have[dep.Path], dep.Version)
		}
	}
	if len(doc.Components) != len(info.Deps)+1 {
		t.Errorf("%s: %d components; want the binary's %d modules and std", sbomFile, len(doc.Components), len(info.Deps))
	}

	// One commit, one SBOM: a second run writes the same bytes.
	if out, err := release(t, tool, dist, version, tag, debVersion); err != nil {
		t.Fatalf("packaging/release, again: %v\n%s", err, out)
	}
	again, err := os.ReadFile(filepath.Join(dist, sbomFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Errorf("%s differs between two runs on one binary", sbomFile)
	}
}
