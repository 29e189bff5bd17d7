package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/netlab"
)

// TestSanbootCachedISO: Debian's ipxe.iso is pulled into siteboot's cache
// from an origin on another host (`image add`, `image pull --wait`), a BIOS
// machine gets a sanboot entry of it, and its iPXE reads the ISO from
// siteboot's /cache/<sha256> with a HEAD (counted in the metrics; the
// cache logs no line for HEAD) and then 206 range GETs, never from the
// origin; the ISO's own iPXE then starts and DHCPs again (its DISCOVER
// reaches siteboot before any further /boot.ipxe from the machine, which
// is what a failed sanboot would fetch first).
func TestSanbootCachedISO(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(netlab.BIOS), netlab.Needs{Files: []string{isoFile}})
	iso, err := os.ReadFile(isoFile)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(iso)
	digest := hex.EncodeToString(sum[:])
	b := newBootLab(t, map[string][]byte{isoPath: iso})
	ctx, cancel := context.WithTimeout(b.lab.Context(), vmTimeout)
	defer cancel()
	b.cacheISO(ctx, t, digest, len(iso))
	mac := netlab.RandomMAC()
	b.app.mustCLI(ctx, "entry", "add", "--node-id", "node-sanboot", "--mac", mac.String(), "--sanboot-sha256", digest, "--ttl", "1h")

	vm, start := b.startVM(t, netlab.VMConfig{Label: "sanboot", MAC: mac})
	var s sanbootSeen
	err = waitUntil(ctx, vm, func() bool {
		s = b.sanbootSeen(mac.String(), digest)
		return s.redhcpAt.After(s.first206)
	})
	if err != nil {
		t.Fatalf("sanboot VM %s: no range read followed by the ISO's own DHCP: %v\nseen: %+v", mac, err, s)
	}
	if s.bootstrapAt.Before(s.redhcpAt) && !s.bootstrapAt.IsZero() {
		t.Errorf("the machine fetched /boot.ipxe at %v, before the ISO's DISCOVER at %v: the sanboot failed and retried",
			s.bootstrapAt.Format(time.StampMilli), s.redhcpAt.Format(time.StampMilli))
	}
	if diff := cmp.Diff([]string{"GET 206"}, s.kinds); diff != "" {
		t.Errorf("/cache/%s GETs from the VM (-want +got):\n%s", digest[:12], diff)
	}
	b.checkSanbootMetrics(ctx, t, s)
	b.checkOriginPulledOnce(t)
	t.Logf("sanboot from power-on: script %v, first 206 %v, ISO's DISCOVER %v; %d range GETs, %d bytes",
		s.scriptAt.Sub(start).Round(100*time.Millisecond), s.first206.Sub(start).Round(100*time.Millisecond),
		s.redhcpAt.Sub(start).Round(100*time.Millisecond), s.ranges, s.bytes)
}

// cacheISO adds the ISO to the cache and waits until it is READY.
func (b *bootLab) cacheISO(ctx context.Context, t *testing.T, digest string, size int) {
	t.Helper()
	b.app.mustCLI(ctx, "image", "add", "--url", b.origin.base+isoPath, "--sha256", digest, "--format", "iso")
	b.app.mustCLI(ctx, "image", "pull", "--wait", "--timeout", "90s")
	var ls sitebootv1.ListImagesResponse
	b.app.cliJSON(ctx, &ls, "image", "ls")
	var got []string
	for _, im := range ls.GetImages() {
		got = append(got, hex.EncodeToString(im.GetSha256())+" "+im.GetState()+" "+im.GetFormat())
		if hex.EncodeToString(im.GetSha256()) == digest && im.GetSizeBytes() != uint64(size) {
			t.Errorf("image ls: size %d, want %d", im.GetSizeBytes(), size)
		}
	}
	if diff := cmp.Diff([]string{digest + " ready iso"}, got); diff != "" {
		t.Fatalf("image ls after pull --wait (-want +got):\n%s", diff)
	}
}

// sanbootSeen is what siteboot logged of one machine's sanboot.
type sanbootSeen struct {
	scriptAt, first206, redhcpAt, bootstrapAt time.Time
	// kinds are the distinct "GET code" of the logged /cache reads, in
	// order (HEADs are left out; the metrics count them).
	kinds  []string
	ranges int
	bytes  int64
}

// sanbootSeen reads siteboot's log: the sanboot script for mac, the
// /cache reads of digest from the address it was served to, then the
// first DISCOVER from mac and /boot.ipxe from that address after the
// first 206.
func (b *bootLab) sanbootSeen(mac, digest string) sanbootSeen {
	var s sanbootSeen
	logs := b.app.logs()
	scripts := filterLog(logs, msgScript, map[string]string{"mac": mac, "result": "sanboot"})
	if len(scripts) == 0 {
		return s
	}
	s.scriptAt = scripts[0].at()
	vmIP := scripts[0].str("remote")
	for _, l := range filterLog(logs, msgCache, map[string]string{"sha256": digest}) {
		if host, _, _ := net.SplitHostPort(l.str("remote")); host != vmIP {
			continue
		}
		s.noteCacheRead(l)
	}
	if s.first206.IsZero() {
		return s
	}
	for _, l := range filterLog(logs, msgDHCP, map[string]string{"mac": mac, "decision": "offer"}) {
		if l.at().After(s.first206) {
			s.redhcpAt = l.at()
			break
		}
	}
	for _, l := range filterLog(logs, msgBootstrap, map[string]string{"remote": vmIP}) {
		if l.at().After(s.first206) {
			s.bootstrapAt = l.at()
			break
		}
	}
	return s
}

func (s *sanbootSeen) noteCacheRead(l logLine) {
	kind := l.str("method") + " " + l.str("code")
	if l.str("method") != "GET" {
		return
	}
	if len(s.kinds) == 0 || s.kinds[len(s.kinds)-1] != kind {
		s.kinds = append(s.kinds, kind)
	}
	if kind == "GET 206" {
		if s.first206.IsZero() {
			s.first206 = l.at()
		}
		s.ranges++
		if n, ok := l["bytes"].(float64); ok {
			s.bytes += int64(n)
		}
	}
}

// checkSanbootMetrics: siteboot's counters show the sanboot script, every
// logged 206 and the bytes they carried, a 200 per sanboot script that no
// GET line accounts for (iPXE's HEAD for the size; the VM is the cache's
// only client), and that the fast path answered them all.
func (b *bootLab) checkSanbootMetrics(ctx context.Context, t *testing.T, s sanbootSeen) {
	t.Helper()
	m := b.app.mustScrape(ctx)
	scripts := m.value("siteboot_ipxe_scripts_total", "kind=sanboot")
	checks := []counterCheck{
		{"siteboot_ipxe_scripts_total{kind=sanboot}", scripts, 1},
		{"siteboot_cache_requests_total{code=200}", m.value("siteboot_cache_requests_total", "code=200"), 1},
		{"siteboot_cache_requests_total{code=206}", m.value("siteboot_cache_requests_total", "code=206"), float64(s.ranges)},
		{"siteboot_cache_bytes_served_total", m.value("siteboot_cache_bytes_served_total"), float64(s.bytes)},
	}
	for _, c := range checks {
		if c.got < c.atLeast {
			t.Errorf("%s = %g, want ≥ %g", c.name, c.got, c.atLeast)
		}
	}
	// iPXE's sanboot reads are plain HEAD and Range GETs on a connection of
	// their own: the fast path answers every one, with the same headers
	// net/http would send (imagecache's fastpath_test compares them).
	if fast, all := m.value("siteboot_cache_fast_path_responses_total"), checks[1].got+checks[2].got; fast != all {
		t.Errorf("siteboot_cache_fast_path_responses_total = %g, want all %g /cache answers: real iPXE went through net/http", fast, all)
	}
	if heads := checks[1].got; heads > scripts {
		t.Errorf("siteboot_cache_requests_total{code=200} = %g: more than one per sanboot script (%g)", heads, scripts)
	}
	t.Logf("siteboot_cache_requests_total: %v; bytes served %g; fast path: %g responses, %g hand-offs", m.nonZero("siteboot_cache_requests_total"),
		m.value("siteboot_cache_bytes_served_total"), m.value("siteboot_cache_fast_path_responses_total"), m.value("siteboot_cache_fast_path_handoffs_total"))
}

// checkOriginPulledOnce: the origin served the ISO once, to siteboot's
// pull; the machine read it only from the cache.
func (b *bootLab) checkOriginPulledOnce(t *testing.T) {
	t.Helper()
	var got []string
	for _, h := range b.origin.requests() {
		got = append(got, h.Remote+" "+h.Method+" "+h.Path)
	}
	want := []string{b.app.host.Addr().String() + " GET " + isoPath}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("origin requests (-want +got):\n%s", diff)
	}
}
