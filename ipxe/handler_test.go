package ipxe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

type httpResult struct {
	Status      int
	ContentType string
	RetryAfter  string
}

func TestHandler(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       string
		host       string
		mutate     func(*Config)
		prepare    func(*fixture)
		want       httpResult
		bodyHas    []string
		bodyLacks  []string
		wantKinds  map[string]float64
		wantSigns  int32
		wantLookup int32 // secret resolutions
		wantLedger []*agentv1.DiscoveredMachine
	}{
		{
			name: "ramdisk", path: "/ipxe?" + ramdiskQuery + "&buildarch=x86_64&platform=efi",
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"#!ipxe\n", "kernel --name kernel http://images.example.net/agent/vmlinuz initrd=initrd ", "bc.assertion="},
			wantKinds: map[string]float64{"ramdisk": 1}, wantSigns: 1, wantLookup: 1,
		},
		{
			name: "HEAD ramdisk", method: http.MethodHead, path: "/ipxe?" + ramdiskQuery,
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			wantKinds: map[string]float64{"ramdisk": 1}, wantSigns: 1, wantLookup: 1,
		},
		{
			name: "sanboot signs nothing, resolves nothing", path: "/ipxe?mac=" + macSanboot,
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"sanboot --no-describe " + testBase + "/cache/" + isoHex},
			bodyLacks: []string{"bc.", "agent.example.net"},
			wantKinds: map[string]float64{"sanboot": 1},
		},
		{
			name: "chain", path: "/ipxe?mac=" + macChain,
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"chain --autofree --replace https://agent.example.net/scripts/"},
			wantKinds: map[string]float64{"chain": 1},
		},
		{
			name: "unknown machine is told, and not recorded", path: "/ipxe?mac=52-54-00-00-00-09&uuid=" + uuidRamdisk + "&buildarch=arm64&platform=efi",
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"machine " + macUnknown + " is not registered"},
			wantKinds: map[string]float64{"unknown": 1},
		},
		{
			name: "pinned entry asked without its uuid: told it is unknown, nothing signed", path: "/ipxe?mac=" + macRamdisk,
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"machine " + macRamdisk + " is not registered"},
			bodyLacks: []string{"bc.", "kernel"},
			wantKinds: map[string]float64{"uuid-mismatch": 1},
		},
		{
			name: "fenced: 503, nothing signed, resolved or recorded", path: "/ipxe?" + ramdiskQuery,
			prepare:   func(f *fixture) { f.gate.set(0, false) },
			want:      httpResult{503, "text/plain; charset=utf-8", "30"},
			bodyHas:   []string{"fenced"},
			wantKinds: map[string]float64{"fenced": 1},
		},
		{
			name: "fenced unknown machine is not recorded", path: "/ipxe?mac=" + macUnknown,
			prepare:   func(f *fixture) { f.gate.set(0, false) },
			want:      httpResult{503, "text/plain; charset=utf-8", "30"},
			wantKinds: map[string]float64{"fenced": 1},
		},
		{
			name: "fenced bootstrap", path: "/boot.ipxe",
			prepare:   func(f *fixture) { f.gate.set(0, false) },
			want:      httpResult{503, "text/plain; charset=utf-8", "30"},
			wantKinds: map[string]float64{"fenced": 1},
		},
		{
			name: "bad mac: 400 naming the field", path: "/ipxe?mac=zz:54:00:00:00:01",
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"ipxe: mac: "},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "no mac", path: "/ipxe?uuid=" + uuidRamdisk,
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"mac: is required"},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "mac given twice", path: "/ipxe?mac=" + macUnknown + "&mac=" + macRamdisk,
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"mac: given more than once"},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "malformed query", path: "/ipxe?mac=%zz",
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"query: malformed"},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "oversize query", path: "/ipxe?" + ramdiskQuery + "&serial=" + strings.Repeat("x", 3000),
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"query: longer than"},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "injection in buildarch", path: "/ipxe?" + ramdiskQuery + "&buildarch=x86_64%0Ashell",
			want:      httpResult{400, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"buildarch: "},
			wantKinds: map[string]float64{"error": 1},
		},
		{
			name: "the ip parameter is ignored", path: "/ipxe?" + ramdiskQuery + "&ip=not-an-ip",
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			wantKinds: map[string]float64{"ramdisk": 1}, wantSigns: 1, wantLookup: 1,
		},
		{
			name: "unresolvable token: 500 naming the ref", path: "/ipxe?" + ramdiskQuery,
			prepare:   func(f *fixture) { f.secrets.Secrets = failingSecrets{} },
			want:      httpResult{500, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"ipxe: discovery token ref env://BC_TOKEN cannot be resolved"},
			wantKinds: map[string]float64{"error": 1}, wantLookup: 1,
		},
		{
			name: "POST refused", method: http.MethodPost, path: "/ipxe?" + ramdiskQuery,
			want: httpResult{405, "text/plain; charset=utf-8", ""},
		},
		{
			name: "bootstrap", path: "/boot.ipxe",
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"chain --autofree --replace " + testBase + "/ipxe?mac=${mac}&uuid=${uuid}&buildarch=${buildarch}&platform=${platform}&serial=${serial:uristring}&asset=${asset:uristring} ||\n"},
			wantKinds: map[string]float64{"bootstrap": 1},
		},
		{
			name: "base URL from the arrival address, not the Host header", path: "/boot.ipxe", host: "10.9.9.9:8081",
			mutate:    func(c *Config) { c.BaseURL = "" },
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"chain --autofree --replace http://127.0.0.1:"},
			bodyLacks: []string{"10.9.9.9"},
			wantKinds: map[string]float64{"bootstrap": 1},
		},
		{
			name: "hostile Host header goes nowhere", path: "/ipxe?" + ramdiskQuery, host: "a${x}b",
			mutate:    func(c *Config) { c.BaseURL = "" },
			want:      httpResult{200, "text/plain; charset=utf-8", ""},
			bodyHas:   []string{"bc.appliance=http://127.0.0.1:"},
			bodyLacks: []string{"a${x}b", "a%24%7Bx%7Db"},
			wantKinds: map[string]float64{"ramdisk": 1}, wantSigns: 1, wantLookup: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.mutate)
			if tt.prepare != nil {
				tt.prepare(f)
			}
			ts := httptest.NewServer(f.srv.Handler())
			defer ts.Close()
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, ts.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got := httpResult{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After")}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("response (-want +got):\n%s\nbody:\n%s", diff, body)
			}
			for _, s := range tt.bodyHas {
				if !strings.Contains(string(body), s) {
					t.Errorf("body lacks %q:\n%s", s, body)
				}
			}
			for _, s := range append(tt.bodyLacks, "tok en", "\nline2") { // the raw token never
				if strings.Contains(string(body), s) {
					t.Errorf("body has %q:\n%s", s, body)
				}
			}
			if diff := cmp.Diff(tt.wantKinds, f.scripts(t), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("siteboot_ipxe_scripts_total (-want +got):\n%s", diff)
			}
			if n := f.signer.n.Load(); n != tt.wantSigns {
				t.Errorf("signed %d assertions, want %d", n, tt.wantSigns)
			}
			if n := f.secrets.n.Load(); n != tt.wantLookup {
				t.Errorf("resolved %d secrets, want %d", n, tt.wantLookup)
			}
			if diff := cmp.Diff(tt.wantLedger, f.ledger.List(), protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("discovery ledger (-want +got):\n%s", diff)
			}
			checkLogs(t, f.logs.String())
		})
	}
}

// checkLogs: every request logged one line with the request fields, and no
// line carries the token (raw or encoded).
func checkLogs(t *testing.T, logs string) {
	t.Helper()
	for _, s := range []string{"tok en", "tok%20en", "tok\\ en", "line2"} {
		if strings.Contains(logs, s) {
			t.Fatalf("logs carry the token (%q):\n%s", s, logs)
		}
	}
	if logs != "" && !strings.Contains(logs, "remote=127.0.0.1") {
		t.Errorf("request logged without its remote address:\n%s", logs)
	}
}

func TestHandlerLogLine(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/ipxe?" + ramdiskQuery + "&buildarch=x86_64&platform=efi")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	line := strings.TrimSpace(f.logs.String())
	for _, kv := range []string{"mac=" + macRamdisk, "uuid=" + uuidRamdisk, "buildarch=x86_64", "platform=efi", "remote=127.0.0.1", "epoch=7", "result=ramdisk"} {
		if !strings.Contains(line, kv) {
			t.Errorf("log line lacks %s:\n%s", kv, line)
		}
	}
	if strings.Count(line, "\n") != 0 {
		t.Errorf("want one log line per request, got:\n%s", line)
	}
}

func TestHandlerTimesOutNothing(t *testing.T) {
	// A real listener with a short-lived client: the server goroutines end
	// with ts.Close (goleak checks in TestMain).
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	c := &http.Client{Timeout: 5 * time.Second}
	for range 20 {
		resp, err := c.Get(ts.URL + "/ipxe?mac=" + macUnknown)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ts.Close()
	if got := f.ledger.List(); len(got) != 0 {
		t.Fatalf("ledger = %v, want none: HTTP requests never add a machine", got)
	}
}
