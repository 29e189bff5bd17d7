package ipxe

import (
	"encoding/base64"
	"fmt"
	"github.com/siteboot/siteboot/internal/metrictest"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/discovery"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// get fetches url and returns the status and body.
func get(t *testing.T, url string, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestScriptRequestsNeverCreateLedgerEntries is the finding: 300 /ipxe
// requests with made-up MACs and one chosen UUID evicted a real machine
// from the ledger and left 256 forged entries carrying that UUID. Script
// requests now only move last_seen of what DHCP recorded, and are counted.
func TestScriptRequestsNeverCreateLedgerEntries(t *testing.T) {
	const (
		realMAC  = "52:54:00:00:00:aa"
		realUUID = "11111111-2222-3333-4444-555555555555"
		chosen   = "00000000-0000-0000-0000-00000000beef"
	)
	later := t0.Add(time.Minute)
	f := newFixture(t, func(c *Config) { c.Now = func() time.Time { return later } })
	f.ledger.Record(discovery.Sighting{MAC: realMAC, ProductUUID: realUUID, Arch: "bios", Iface: "eth0", At: t0})
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	for i := range 300 {
		if code, body := get(t, fmt.Sprintf("%s/ipxe?mac=02:00:00:00:%02x:%02x&uuid=%s", ts.URL, i/256, i%256, chosen), ""); code != 200 || !strings.Contains(body, "not registered") {
			t.Fatalf("made-up MAC %d: %d %s", i, code, body)
		}
	}
	get(t, ts.URL+"/ipxe?mac="+realMAC+"&uuid="+chosen+"&buildarch=x86_64&platform=efi", "")
	want := []*agentv1.DiscoveredMachine{{
		Mac: realMAC, ProductUuid: realUUID, Arch: "bios", Count: 1,
		FirstSeen: timestamppb.New(t0), LastSeen: timestamppb.New(later),
	}}
	if diff := cmp.Diff(want, f.ledger.List(), protocmp.Transform()); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	got := metrictest.Values(t, f.reg)
	if got[`siteboot_ipxe_unknown_requests_total{seen_on_dhcp="false"}`] != 300 || got[`siteboot_ipxe_unknown_requests_total{seen_on_dhcp="true"}`] != 1 {
		t.Errorf("unknown_requests_total = %v", got)
	}
}

// TestUUIDLockOverHTTP: an entry that pins a product_uuid serves its
// script only to a request presenting that UUID; anything else gets the
// unknown-machine script, nothing signed, no secret resolved, and a Warn
// line saying why.
func TestUUIDLockOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, uuid string
		served     bool
	}{
		{"the pinned UUID, as iPXE writes it", strings.ToUpper(uuidRamdisk), true},
		{"no uuid", "", false},
		{"another uuid", "8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2c", false},
		{"the SMBIOS placeholder", "00000000-0000-0000-0000-000000000000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			ts := httptest.NewServer(f.srv.Handler())
			defer ts.Close()
			code, body := get(t, ts.URL+"/ipxe?mac="+macRamdisk+"&uuid="+tc.uuid+"&buildarch=x86_64&platform=efi", "")
			if code != 200 || strings.Contains(body, "bc.assertion=") != tc.served || strings.Contains(body, "not registered") == tc.served {
				t.Fatalf("%d:\n%s", code, body)
			}
			if tc.served {
				return
			}
			if f.signer.n.Load() != 0 || f.secrets.n.Load() != 0 {
				t.Errorf("signed %d, resolved %d; want nothing", f.signer.n.Load(), f.secrets.n.Load())
			}
			if diff := cmp.Diff(map[string]float64{"uuid-mismatch": 1}, f.scripts(t)); diff != "" {
				t.Errorf("scripts_total (-want +got):\n%s", diff)
			}
			if logs := f.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "the entry pins product_uuid "+uuidRamdisk) {
				t.Errorf("no Warn line saying why:\n%s", logs)
			}
		})
	}
}

// TestAssertionSaysWhatWasObserved: the signed assertion carries the
// entry's MAC, the address the request came from, and the product_uuid
// the DHCP proxy saw for the MAC (or, for a pinned entry, the pin); never a
// uuid or ip the query alone claims.
func TestAssertionSaysWhatWasObserved(t *testing.T) {
	const (
		macOpen  = "52:54:00:00:00:04" // a ramdisk entry without a pin
		dhcpUUID = "aaaaaaaa-0000-4000-8000-000000000001"
		httpUUID = "bbbbbbbb-0000-4000-8000-000000000002"
	)
	seen := discovery.NewObservations(discovery.ObservationsConfig{MaxAge: time.Minute})
	f := newFixture(t, func(c *Config) { c.Observed = seen })
	f.put(t, "node-1", &sitev1.ProxyDhcpEntry{Mac: macOpen, WorkflowId: "wf-45", NotAfter: timestamppb.New(t0.Add(time.Hour))})
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	query := "&ip=203.0.113.9&buildarch=x86_64&platform=efi"
	type said struct{ Mac, IP, UUID string }
	assertion := func(path string) said {
		t.Helper()
		code, body := get(t, ts.URL+path, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		a := verifyAssertion(t, f, kernelParams(t, body)["bc.assertion"])
		return said{a.GetMac(), a.GetIp(), a.GetProductUuid()}
	}
	got := []said{assertion("/ipxe?mac=52-54-00-00-00-04&uuid=" + httpUUID + query)}
	seen.Observe(discovery.Sighting{MAC: macOpen, ProductUUID: dhcpUUID, At: t0.Add(-time.Minute)})
	got = append(got, assertion("/ipxe?mac="+macOpen+"&uuid="+httpUUID+query))
	seen.Observe(discovery.Sighting{MAC: macOpen, ProductUUID: dhcpUUID, At: t0.Add(-2 * time.Minute)})
	got = append(got, assertion("/ipxe?mac="+macOpen+"&uuid="+dhcpUUID+query)) // too old to count
	got = append(got, assertion("/ipxe?"+ramdiskQuery+query))                  // pinned
	want := []said{
		{macOpen, "127.0.0.1", ""},
		{macOpen, "127.0.0.1", dhcpUUID},
		{macOpen, "127.0.0.1", ""},
		{macRamdisk, "127.0.0.1", uuidRamdisk},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("assertions (-want +got):\n%s", diff)
	}
}

func verifyAssertion(t *testing.T, f *fixture, b64 string) *sitev1.DiscoveryAssertion {
	t.Helper()
	wire, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	sa := &sitev1.SignedDiscoveryAssertion{}
	if err := proto.Unmarshal(wire, sa); err != nil {
		t.Fatal(err)
	}
	a, err := discovery.VerifyAssertion(f.key.Public(), sa)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestBaseURLIsTheArrivalAddress: without Config.BaseURL, script URLs name
// the address the request arrived at (here 127.0.0.2, a loopback address
// of its own), whatever the Host header says.
func TestBaseURLIsTheArrivalAddress(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BaseURL = "" })
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address here: %v", err)
	}
	ts := &httptest.Server{Listener: ln, Config: &http.Server{Handler: f.srv.Handler()}}
	ts.Start()
	defer ts.Close()
	base := "http://" + ln.Addr().String()
	for _, path := range []string{"/boot.ipxe", "/ipxe?" + ramdiskQuery} {
		_, body := get(t, base+path, "attacker.example:8080")
		if strings.Contains(body, "attacker") || !strings.Contains(body, base+"/") {
			t.Errorf("%s with Host attacker.example:8080:\n%s", path, body)
		}
	}
}

// TestUnknownFloodLogLinesHTTP: unknown MACs flooding /ipxe from one
// address write a bounded number of lines; the next one says how many were
// held back.
func TestUnknownFloodLogLinesHTTP(t *testing.T) {
	var mu sync.Mutex
	now := t0
	f := newFixture(t, func(c *Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	for i := range 100 {
		get(t, fmt.Sprintf("%s/ipxe?mac=02:00:00:00:00:%02x", ts.URL, i), "")
	}
	if n := strings.Count(f.logs.String(), "level=INFO"); n > remoteLogBurst {
		t.Fatalf("100 unknown MACs from one address wrote %d Info lines, want at most %d", n, remoteLogBurst)
	}
	f.logs.Reset()
	mu.Lock()
	now = now.Add(remoteLogEvery)
	mu.Unlock()
	get(t, ts.URL+"/ipxe?mac=02:00:00:00:01:00", "")
	if want := fmt.Sprintf("suppressed=%d", 100-remoteLogBurst); !strings.Contains(f.logs.String(), want) {
		t.Errorf("next line lacks %s:\n%s", want, f.logs.String())
	}
}

// TestRepeatedRequestLogLinesHTTP: requests a client repeats at will while the
// appliance is fenced (503), for an entry that cannot be rendered (500),
// and for the bootstrap or a script (anyone may ask for those) write a
// bounded number of lines per remote address, like every other line a
// client causes; the next one says how many were held back.
func TestRepeatedRequestLogLinesHTTP(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		prepare func(*fixture)
		level   string
	}{
		{"fenced script", "/ipxe?" + ramdiskQuery, func(f *fixture) { f.gate.set(0, false) }, "level=INFO"},
		{"fenced bootstrap", "/boot.ipxe", func(f *fixture) { f.gate.set(0, false) }, "level=INFO"},
		{"token that cannot be resolved", "/ipxe?" + ramdiskQuery, func(f *fixture) { f.secrets.Secrets = failingSecrets{} }, "level=ERROR"},
		{"bootstrap served", "/boot.ipxe", func(*fixture) {}, "level=INFO"},
		{"script served", "/ipxe?mac=" + macChain, func(*fixture) {}, "level=INFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			now := t0
			f := newFixture(t, func(c *Config) {
				c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			})
			tt.prepare(f)
			ts := httptest.NewServer(f.srv.Handler())
			defer ts.Close()
			for range 100 {
				get(t, ts.URL+tt.path, "")
			}
			if n := strings.Count(f.logs.String(), tt.level); n == 0 || n > remoteLogBurst {
				t.Fatalf("100 requests from one address wrote %d %s lines, want 1-%d", n, tt.level, remoteLogBurst)
			}
			f.logs.Reset()
			mu.Lock()
			now = now.Add(remoteLogEvery)
			mu.Unlock()
			get(t, ts.URL+tt.path, "")
			if want := fmt.Sprintf("suppressed=%d", 100-remoteLogBurst); !strings.Contains(f.logs.String(), want) {
				t.Errorf("next line lacks %s:\n%s", want, f.logs.String())
			}
		})
	}
}

// TestForgedDHCPUUIDIsNotSigned: someone who sends a DHCP request with the
// MAC of a machine whose entry pins no UUID, and a UUID of their choosing,
// before or after the machine's own request, cannot make the machine's
// assertion carry that UUID: two UUIDs for one MAC within the
// observations' age put none in the assertion.
func TestForgedDHCPUUIDIsNotSigned(t *testing.T) {
	const (
		macOpen  = "52:54:00:00:00:04"
		realUUID = "aaaaaaaa-0000-4000-8000-000000000001"
		forged   = "bbbbbbbb-0000-4000-8000-000000000002"
	)
	for _, order := range [][]string{{realUUID, forged}, {forged, realUUID}} {
		seen := discovery.NewObservations(discovery.ObservationsConfig{MaxAge: time.Minute})
		f := newFixture(t, func(c *Config) { c.Observed = seen })
		f.put(t, "node-1", &sitev1.ProxyDhcpEntry{Mac: macOpen, WorkflowId: "wf-45", NotAfter: timestamppb.New(t0.Add(time.Hour))})
		ts := httptest.NewServer(f.srv.Handler())
		for i, u := range order {
			seen.Observe(discovery.Sighting{MAC: macOpen, ProductUUID: u, At: t0.Add(time.Duration(i-2) * 10 * time.Second)})
		}
		code, body := get(t, ts.URL+"/ipxe?mac="+macOpen+"&uuid="+order[1], "")
		ts.Close()
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if got := verifyAssertion(t, f, kernelParams(t, body)["bc.assertion"]).GetProductUuid(); got != "" {
			t.Errorf("DHCP saw %v for one MAC; the assertion says product_uuid %q, want none", order, got)
		}
	}
}
