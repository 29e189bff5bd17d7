package ipxe

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// gateMovingSigner signs with the real key and, while it signs, moves the
// gate (as a lease lost during a slow signature would).
type gateMovingSigner struct {
	Signer
	during func()
}

func (g gateMovingSigner) SignAssertion(a *sitev1.DiscoveryAssertion) (*sitev1.SignedDiscoveryAssertion, error) {
	sa, err := g.Signer.SignAssertion(a)
	g.during()
	return sa, err
}

// Nothing signed while fenced: the gate is checked again right after the
// signature, and a signature made across a gate change is dropped —
// Render fails with ErrFenced and /ipxe answers 503 without it.
func TestGateClosesDuringSign(t *testing.T) {
	tests := []struct {
		name string
		move func(g *testGate)
	}{
		{"gate closes", func(g *testGate) { g.set(0, false) }},
		{"gate moves to a new epoch", func(g *testGate) { g.set(8, true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name+": Render", func(t *testing.T) {
			f := newFixture(t, nil)
			f.srv.cfg.Signer = gateMovingSigner{Signer: f.signer, during: func() { tt.move(f.gate) }}
			script, err := f.srv.Render(t.Context(), &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk})
			if !errors.Is(err, ErrFenced) || script != nil {
				t.Fatalf("Render = %v, %v; want nil, ErrFenced", script, err)
			}
			if n := f.signer.n.Load(); n != 1 {
				t.Fatalf("signed %d, want 1 (the signature was made, then dropped)", n)
			}
		})
		t.Run(tt.name+": /ipxe", func(t *testing.T) {
			f := newFixture(t, nil)
			f.srv.cfg.Signer = gateMovingSigner{Signer: f.signer, during: func() { tt.move(f.gate) }}
			ts := httptest.NewServer(f.srv.Handler())
			defer ts.Close()
			resp, err := http.Get(ts.URL + "/ipxe?" + ramdiskQuery)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "bc.assertion") {
				t.Fatalf("/ipxe = %d:\n%s\nwant 503 without an assertion", resp.StatusCode, body)
			}
		})
	}
	// The same signer with a gate that stays put serves the assertion.
	f := newFixture(t, nil)
	f.srv.cfg.Signer = gateMovingSigner{Signer: f.signer, during: func() {}}
	script, err := f.srv.Render(t.Context(), &sitev1.IpxeScriptRequest{Mac: macRamdisk, Uuid: uuidRamdisk})
	if err != nil || !strings.Contains(script.GetScript(), "bc.assertion=") {
		t.Fatalf("steady gate: %v\n%s", err, script.GetScript())
	}
}
