package ipxe

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/bootentry"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// kernelParams returns the bc.* parameters of a ramdisk script's kernel
// line, percent-decoded.
func kernelParams(t *testing.T, script string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(line, "kernel ") {
			continue
		}
		out := map[string]string{}
		for _, tok := range strings.Fields(line) {
			k, v, ok := strings.Cut(tok, "=")
			if !ok || !strings.HasPrefix(k, "bc.") {
				continue
			}
			dec, err := url.PathUnescape(v)
			if err != nil {
				t.Fatalf("%s=%s does not decode: %v", k, v, err)
			}
			out[k] = dec
		}
		return out
	}
	t.Fatalf("no kernel line in:\n%s", script)
	return nil
}

// TestRenderAssertionVerifies: the ramdisk script's bc.assertion is a
// SignedDiscoveryAssertion that the real discovery signer's public key
// verifies, saying what the request and the entry say.
func TestRenderAssertionVerifies(t *testing.T) {
	f := newFixture(t, nil)
	got, err := f.srv.Render(context.Background(), &sitev1.IpxeScriptRequest{
		Mac: "52:54:00:00:00:01", Uuid: uuidRamdisk, Ip: "10.0.0.77", Buildarch: "x86_64", Platform: "efi",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := kernelParams(t, got.GetScript())
	wantParams := map[string]string{
		"bc.site_id": testSite, "bc.appliance": testBase, "bc.mac": macRamdisk,
		"bc.workflow_id": "wf-42", "bc.discovery_token": testToken, "bc.assertion": p["bc.assertion"],
	}
	if diff := cmp.Diff(wantParams, p); diff != "" {
		t.Errorf("kernel parameters (-want +got):\n%s", diff)
	}
	wire, err := base64.RawURLEncoding.DecodeString(p["bc.assertion"])
	if err != nil {
		t.Fatal(err)
	}
	sa := &sitev1.SignedDiscoveryAssertion{}
	if err := proto.Unmarshal(wire, sa); err != nil {
		t.Fatal(err)
	}
	pub, err := discovery.ParsePublicKeyPEM(f.key.PublicKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	a, err := discovery.VerifyAssertion(pub, sa)
	if err != nil {
		t.Fatalf("assertion does not verify: %v", err)
	}
	want := &sitev1.DiscoveryAssertion{
		SiteId: testSite, SiteAgentNodeId: testNode, BootLeaseEpoch: 7,
		Mac: macRamdisk, Ip: "10.0.0.77", ProductUuid: uuidRamdisk, WorkflowId: "wf-42",
		IssuedAt: timestamppb.New(t0), NotAfter: timestamppb.New(t0.Add(time.Hour)),
	}
	if diff := cmp.Diff(want, a, protocmp.Transform()); diff != "" {
		t.Errorf("assertion (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.GetNotAfter(), got.GetNotAfter(), protocmp.Transform()); diff != "" {
		t.Errorf("IpxeScript.not_after (-assertion +script):\n%s", diff)
	}
}

func TestRenderNotAfterNeverPastEntry(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AssertionTTL = 10 * time.Hour })
	got, err := f.srv.Render(context.Background(), &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk})
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(4 * time.Hour); !got.GetNotAfter().AsTime().Equal(want) {
		t.Fatalf("not_after = %v, want the entry's %v", got.GetNotAfter().AsTime(), want)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*Config)
		prepare   func(*fixture)
		req       *sitev1.IpxeScriptRequest
		check     func(t *testing.T, err error)
		wantSigns int32
	}{
		{
			name: "missing mac", req: &sitev1.IpxeScriptRequest{},
			check: wantField("mac"),
		},
		{
			name: "bad mac", req: &sitev1.IpxeScriptRequest{Mac: "52:54:00:00:00:01\nkernel x"},
			check: wantField("mac"),
		},
		{
			name: "multicast mac", req: &sitev1.IpxeScriptRequest{Mac: "01:00:5e:00:00:01"},
			check: wantField("mac"),
		},
		{
			name: "bad uuid", req: &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: "${net0/mac}"},
			check: wantField("uuid"),
		},
		{
			name: "bad ip", req: &sitev1.IpxeScriptRequest{Mac: macRamdisk, Ip: "10.0.0.1 kernel"},
			check: wantField("ip"),
		},
		{
			name: "bad buildarch", req: &sitev1.IpxeScriptRequest{Mac: macRamdisk, Buildarch: "x86 64"},
			check: wantField("buildarch"),
		},
		{
			name: "bad platform", req: &sitev1.IpxeScriptRequest{Mac: macRamdisk, Platform: "EFI"},
			check: wantField("platform"),
		},
		{
			name: "control char in serial", req: &sitev1.IpxeScriptRequest{Mac: macRamdisk, Serial: "a\rb"},
			check: wantField("serial"),
		},
		{
			name: "fenced", prepare: func(f *fixture) { f.gate.set(0, false) },
			req:   &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check: wantIs(ErrFenced),
		},
		{
			name: "gate closes while the token is resolved",
			prepare: func(f *fixture) {
				f.secrets.before = func() { f.gate.set(0, false) }
			},
			req:   &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check: wantIs(ErrFenced),
		},
		{
			name: "unknown machine", req: &sitev1.IpxeScriptRequest{Mac: macUnknown},
			check: func(t *testing.T, err error) {
				var u *UnknownMachineError
				if !errors.As(err, &u) || u.MAC != macUnknown || !strings.Contains(u.Script.GetScript(), "not registered") {
					t.Fatalf("err = %v, want *UnknownMachineError for %s with its script", err, macUnknown)
				}
			},
		},
		{
			name:    "expired entry is unknown",
			prepare: func(f *fixture) { f.srv.cfg.Now = func() time.Time { return t0.Add(5 * time.Hour) } },
			req:     &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check: func(t *testing.T, err error) {
				var u *UnknownMachineError
				if !errors.As(err, &u) {
					t.Fatalf("err = %v, want *UnknownMachineError", err)
				}
			},
		},
		{
			name: "token ref unresolvable",
			mutate: func(c *Config) {
				c.Secrets = &countingSecrets{Secrets: failingSecrets{}}
			},
			req:   &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check: wantSecret("env://BC_TOKEN"),
		},
		{
			name:   "no resolver configured",
			mutate: func(c *Config) { c.Secrets = nil },
			req:    &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check:  wantSecret("env://BC_TOKEN"),
		},
		{
			name:   "no ramdisk profile",
			mutate: func(c *Config) { c.Ramdisk = Ramdisk{} },
			req:    &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk},
			check:  wantEntry("no ramdisk profile"),
		},
		// The site state refuses such entries; the renderer still checks
		// what a lookup hands it before it writes a script.
		{
			name:   "entry script URL unsafe",
			mutate: withEntry(bootentry.Entry{MAC: macChain, IPXEScriptURL: "http://x/a${b}", NotAfter: t0.Add(time.Hour)}),
			req:    &sitev1.IpxeScriptRequest{Mac: macChain},
			check:  wantEntry("ipxe_script_url"),
		},
		{
			name:   "entry sanboot digest not 32 bytes",
			mutate: withEntry(bootentry.Entry{MAC: macSanboot, SanbootSHA256: "0102", NotAfter: t0.Add(time.Hour)}),
			req:    &sitev1.IpxeScriptRequest{Mac: macSanboot},
			check:  wantEntry("sanboot_sha256"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.mutate)
			if tt.prepare != nil {
				tt.prepare(f)
			}
			before := f.ledger.Count()
			got, err := f.srv.Render(context.Background(), tt.req)
			if err == nil {
				t.Fatalf("Render succeeded:\n%s", got.GetScript())
			}
			tt.check(t, err)
			if strings.Contains(err.Error(), testToken) {
				t.Fatalf("the error carries the token: %v", err)
			}
			if n := f.signer.n.Load(); n != tt.wantSigns {
				t.Fatalf("signed %d assertions, want %d", n, tt.wantSigns)
			}
			if f.ledger.Count() != before {
				t.Fatal("Render changed the discovery ledger")
			}
		})
	}
}

// entryMap is a lookup that returns what it holds, for entries the real
// site state would refuse to store.
type entryMap map[string]bootentry.Entry

func (m entryMap) Lookup(mac string, now time.Time) (bootentry.Entry, bool) {
	e, ok := m[mac]
	return e, ok && e.LiveAt(now)
}

func withEntry(e bootentry.Entry) func(*Config) {
	return func(c *Config) { c.Entries = entryMap{e.MAC: e} }
}

type failingSecrets struct{}

func (failingSecrets) Resolve(context.Context, string) ([]byte, error) {
	return nil, errors.New("secret env://BC_TOKEN: variable not set")
}

func wantField(field string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var re *RequestError
		if !errors.As(err, &re) || re.Field != field {
			t.Fatalf("err = %v, want a *RequestError for field %q", err, field)
		}
	}
}

func wantIs(target error) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Fatalf("err = %v, want %v", err, target)
		}
	}
}

func wantSecret(ref string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var se *SecretError
		if !errors.As(err, &se) || se.Ref != ref || !strings.Contains(err.Error(), ref) {
			t.Fatalf("err = %v, want a *SecretError naming %s", err, ref)
		}
	}
}

func wantEntry(substr string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ee *EntryError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), substr) {
			t.Fatalf("err = %v, want an *EntryError about %q", err, substr)
		}
	}
}

func TestRenderNeedsBaseURL(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BaseURL = "" })
	if _, err := f.srv.Render(context.Background(), &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk}); err == nil {
		t.Fatal("Render without a BaseURL succeeded")
	}
}

func TestPreviewGivenBase(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BaseURL = "" })
	got, err := f.srv.Preview(context.Background(), &sitev1.IpxeScriptRequest{Mac: macChain}, "http://10.9.9.9:8080/", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.GetScript(), "http://10.9.9.9:8080/boot.ipxe") {
		t.Fatalf("script does not use the given base:\n%s", got.GetScript())
	}
	var re *RequestError
	if _, err := f.srv.Preview(context.Background(), &sitev1.IpxeScriptRequest{Mac: macChain}, "http://10.9.9.9/x?y=1", false); !errors.As(err, &re) || re.Field != "base_url" {
		t.Fatalf("Preview with a query in the base = %v; want a base_url RequestError", err)
	}
}

// TestPreviewRedactsSecrets: an operator's preview shows neither the
// discovery token nor a signature unless it asks to reveal them; then it is
// exactly what the machine would get.
func TestPreviewRedactsSecrets(t *testing.T) {
	f := newFixture(t, nil)
	req := &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk, Ip: "10.0.0.77", Buildarch: "x86_64", Platform: "efi"}
	got, err := f.srv.Preview(context.Background(), req, testBase, false)
	if err != nil {
		t.Fatal(err)
	}
	p := kernelParams(t, got.GetScript())
	if p["bc.discovery_token"] != Redacted || p["bc.assertion"] != Redacted {
		t.Fatalf("preview kernel parameters: token %q, assertion %q; want both %q", p["bc.discovery_token"], p["bc.assertion"], Redacted)
	}
	if strings.Contains(got.GetScript(), testToken) {
		t.Fatal("the redacted preview carries the token")
	}
	revealed, err := f.srv.Preview(context.Background(), req, testBase, true)
	if err != nil {
		t.Fatal(err)
	}
	p = kernelParams(t, revealed.GetScript())
	if p["bc.discovery_token"] != testToken || p["bc.assertion"] == Redacted || p["bc.assertion"] == "" {
		t.Fatalf("revealed preview: token %q, assertion %q; want the token and a signed assertion", p["bc.discovery_token"], p["bc.assertion"])
	}
}
