package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// origin serves named byte slices over real HTTP on loopback.
func origin(t *testing.T, files map[string][]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", fixedTime, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCLIImagesAndSiteSpec(t *testing.T) {
	iso := bytes.Repeat([]byte("siteboot iso bytes "), 50000)
	other := bytes.Repeat([]byte("another image "), 1000)
	isoHex, otherHex := hexDigest(iso), hexDigest(other)
	o := origin(t, map[string][]byte{"a.iso": iso, "b.raw": other})
	a := startAppliance(t, testConfig(t))
	sock := a.cfg.Admin.Socket

	// A sanboot entry for an image the cache does not hold is refused.
	_, _, err := cli(t, sock, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:01", "--sanboot-sha256", isoHex)
	if err == nil || !strings.Contains(errorLine(err), "entries[0].sanboot_sha256: image "+isoHex+" is not READY") {
		t.Fatalf("sanboot entry before the image is ready: %v", err)
	}

	mustCLI(t, sock, "image", "add", "--url", o.URL+"/a.iso", "--sha256", isoHex, "--format", "iso")
	out := mustCLI(t, sock, "image", "pull", "--wait", isoHex)
	if !strings.Contains(out, isoHex[:16]+" ready") {
		t.Fatalf("pull --wait output:\n%s", out)
	}
	ls := mustCLI(t, sock, "image", "ls")
	if !strings.Contains(ls, isoHex[:16]) || !strings.Contains(ls, "ready") || !strings.Contains(ls, "added") {
		t.Fatalf("image ls:\n%s", ls)
	}

	// Served from the appliance's HTTP with exact range semantics.
	base := "http://" + httpAddr(t, sock) + "/cache/" + isoHex
	req, _ := http.NewRequest(http.MethodGet, base, nil)
	req.Header.Set("Range", "bytes=512-1023")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, iso[512:1024]) ||
		resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 512-1023/%d", len(iso)) || resp.Header.Get("ETag") != `"`+isoHex+`"` {
		t.Fatalf("range GET: %d %q %q, body ok=%t", resp.StatusCode, resp.Header.Get("Content-Range"), resp.Header.Get("ETag"), bytes.Equal(body, iso[512:1024]))
	}

	// Now the sanboot entry is accepted, and the image is pinned.
	mustCLI(t, sock, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:01", "--sanboot-sha256", isoHex)
	if script := mustCLI(t, sock, "script", "--mac", "52:54:00:00:00:01"); !strings.Contains(script, "sanboot --no-describe") || !strings.Contains(script, "/cache/"+isoHex) {
		t.Fatalf("sanboot script:\n%s", script)
	}
	_, _, err = cli(t, sock, "image", "rm", isoHex)
	if err == nil || !strings.Contains(errorLine(err), "is pinned") {
		t.Fatalf("image rm of a pinned image: %v", err)
	}

	// The site spec, in YAML with hex digests.
	spec := writeFile(t, t.TempDir(), "site.yaml", fmt.Sprintf(`
cacheImages:
  - url: %s/b.raw
    sha256: %s
    format: raw
proxyTargets:
  - nodeId: talos-1
    addresses: [10.0.0.51, talos-1.example]
`, o.URL, otherHex))
	if out := mustCLI(t, sock, "site", "apply", spec); !strings.Contains(out, "applied: 1 cache images, 1 proxy targets") {
		t.Fatalf("site apply: %s", out)
	}
	mustCLI(t, sock, "image", "pull", "--wait")
	show := mustCLI(t, sock, "site", "show")
	if !strings.Contains(show, otherHex) || !strings.Contains(show, "talos-1") {
		t.Fatalf("site show:\n%s", show)
	}
	_, _, err = cli(t, sock, "image", "rm", otherHex)
	if err == nil || !strings.Contains(errorLine(err), "listed by the site spec") {
		t.Fatalf("image rm of a spec image: %v", err)
	}
	bad := writeFile(t, t.TempDir(), "bad.yaml", "cacheImages:\n  - url: http://x/a\n    sha256: "+otherHex+"\n    colour: blue\n")
	if _, _, err := cli(t, sock, "site", "apply", bad); err == nil || !strings.Contains(errorLine(err), "colour") {
		t.Fatalf("site apply with an unknown field: %v", err)
	}
	// Applying an empty spec releases the image; rm then removes it.
	if out := mustCLI(t, sock, "site", "apply", writeFile(t, t.TempDir(), "empty.yaml", "{}\n")); !strings.Contains(out, "released "+otherHex) {
		t.Fatalf("empty spec apply: %s", out)
	}
	mustCLI(t, sock, "image", "rm", otherHex)
	if ls := mustCLI(t, sock, "image", "ls"); strings.Contains(ls, otherHex[:16]) {
		t.Fatalf("removed image still listed:\n%s", ls)
	}
	resp, err = http.Get("http://" + httpAddr(t, sock) + "/cache/" + otherHex)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET of a removed image: %d", resp.StatusCode)
	}
}

func TestCLIPullReportsFailure(t *testing.T) {
	data := []byte("the real bytes")
	o := origin(t, map[string][]byte{"x.raw": []byte("other bytes!!")})
	a := startAppliance(t, testConfig(t))
	sock := a.cfg.Admin.Socket
	d := hexDigest(data)
	mustCLI(t, sock, "image", "add", "--url", o.URL+"/x.raw", "--sha256", d)
	_, _, err := cli(t, sock, "image", "pull", "--wait", d)
	if err == nil || !strings.Contains(errorLine(err), "image "+d+" failed") {
		t.Fatalf("pull of a lying origin: %v", err)
	}
	if ls := mustCLI(t, sock, "image", "ls"); !strings.Contains(ls, "failed") {
		t.Fatalf("image ls does not show the failure:\n%s", ls)
	}
}

func hexDigest(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

var fixedTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
