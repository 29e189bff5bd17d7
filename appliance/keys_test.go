package appliance

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// runAppliance opens a real appliance (raft, node key, HTTP listener on
// loopback; no DHCP or TFTP) and runs it until the test ends.
func runAppliance(t *testing.T) *Appliance {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.NodeID, cfg.SiteID = t.TempDir(), "appliance-1", "site-a"
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.DHCP.Enabled, cfg.TFTP.Enabled = "false", "false"
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	a, err := Open(t.Context(), cfg, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		a.Close()
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("not ready within 15 s")
	}
	return a
}

// /v1/keys serves the node key as a JWKS a strict parser accepts, with
// nothing secret in it.
func TestKeysEndpoint(t *testing.T) {
	a := runAppliance(t)
	resp, err := http.Get("http://" + a.httpLn.Addr().String() + "/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("/v1/keys = %d %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	set, err := discovery.ParseJWKS(body)
	if err != nil {
		t.Fatalf("%v:\n%s", err, body)
	}
	if diff := cmp.Diff([]string{a.signer.KID()}, set.KIDs()); diff != "" {
		t.Fatalf("kids (-want +got):\n%s", diff)
	}
	if k, _ := set.Lookup(a.signer.KID()); !k.Equal(a.signer.Public()) {
		t.Fatal("/v1/keys serves another key under the node key's kid")
	}
	if strings.Contains(string(body), `"d"`) || len(body) > 1024 {
		t.Fatalf("/v1/keys carries more than one public key (%d bytes):\n%s", len(body), body)
	}
	post, err := http.Post("http://"+a.httpLn.Addr().String()+"/v1/keys", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /v1/keys = %d, want 405", post.StatusCode)
	}
}

type fixedKeys []memberKey

func (f fixedKeys) Keys() []memberKey { return f }

// The site's key set is the members' keys and always the own key, each
// once.
func TestSiteKeys(t *testing.T) {
	own, m1, m2 := newKey(t), newKey(t), newKey(t)
	tests := []struct {
		name string
		src  keySource
		want []*ecdsa.PublicKey
	}{
		{"no member keys yet", nil, []*ecdsa.PublicKey{own}},
		{"members include us", fixedKeys{{NodeID: "a", Key: own}, {NodeID: "b", Key: m1}, {NodeID: "c", Key: m2}}, []*ecdsa.PublicKey{own, m1, m2}},
		{"our key not published yet", fixedKeys{{NodeID: "b", Key: m1}}, []*ecdsa.PublicKey{own, m1}},
		{"entry without a key", fixedKeys{{NodeID: "b"}}, []*ecdsa.PublicKey{own}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := siteKeys(own, tt.src)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, k := range tt.want {
				kid, _ := discovery.KeyID(k)
				want = append(want, kid)
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, set.KIDs()); diff != "" {
				t.Fatalf("kids (-want +got):\n%s", diff)
			}
		})
	}
}

func newKey(t *testing.T) *ecdsa.PublicKey {
	t.Helper()
	s, err := discovery.LoadOrCreateKey(t.TempDir() + "/k")
	if err != nil {
		t.Fatal(err)
	}
	return s.Public()
}

// assertionText signs a as the ipxe package does and returns the text
// after bc.assertion=.
func assertionText(t *testing.T, s *discovery.Signer, a *sitev1.DiscoveryAssertion) string {
	t.Helper()
	sa, err := s.SignAssertion(a)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(sa)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(wire)
}

func TestVerifyAssertionOp(t *testing.T) {
	a := runAppliance(t)
	epoch, _ := a.node.Gate()
	now := time.Now()
	text := assertionText(t, a.signer, &sitev1.DiscoveryAssertion{
		SiteId: "site-a", SiteAgentNodeId: "appliance-1", BootLeaseEpoch: epoch, Mac: "52:54:00:00:00:01",
		IssuedAt: timestamppb.New(now), NotAfter: timestamppb.New(now.Add(time.Hour)),
	})
	asOther := assertionText(t, a.signer, &sitev1.DiscoveryAssertion{
		SiteId: "site-a", SiteAgentNodeId: "appliance-2", BootLeaseEpoch: epoch, Mac: "52:54:00:00:00:01",
		IssuedAt: timestamppb.New(now), NotAfter: timestamppb.New(now.Add(time.Hour)),
	})
	other, err := discovery.NewKeySet(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	otherJWKS, _ := other.MarshalJWKS()
	ownJWKS, _ := discovery.NewKeySet(a.signer.Public())
	ownData, _ := ownJWKS.MarshalJWKS()

	tests := []struct {
		name       string
		text       string
		minEpoch   uint64
		jwks       []byte
		wantReason string
	}{
		{"member keys", text, epoch, nil, ""},
		{"keys given", text, 0, ownData, ""},
		{"epoch above", text, epoch + 1, nil, discovery.ReasonStaleEpoch},
		{"keys given lack the signer", text, 0, otherJWKS, discovery.ReasonUnknownKey},
		{"vouches in another member's name", asOther, 0, nil, discovery.ReasonWrongSigner},
		{"another member's name, keys given (they name no node)", asOther, 0, ownData, ""},
		{"changed text", text[:20] + flip(text[20]) + text[21:], 0, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := a.VerifyAssertion(t.Context(), tt.text, tt.minEpoch, tt.jwks)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "changed text" {
				if c.Valid || c.Reason == "" {
					t.Fatalf("changed text verified: %+v", c)
				}
				return
			}
			if c.Valid != (tt.wantReason == "") || c.Reason != tt.wantReason {
				t.Fatalf("check = valid %t reason %q (%s); want reason %q", c.Valid, c.Reason, c.Detail, tt.wantReason)
			}
			if c.KeyID != a.signer.KID() {
				t.Errorf("KeyID = %q, want %q", c.KeyID, a.signer.KID())
			}
			if tt.wantReason != discovery.ReasonUnknownKey && c.Assertion.GetMac() != "52:54:00:00:00:01" {
				t.Errorf("assertion = %v", c.Assertion)
			}
		})
	}
	_, err = a.VerifyAssertion(t.Context(), text, 0, []byte(`{"keys":[{"kty":"RSA"}]}`))
	var ke *discovery.KeySetError
	if !errors.As(err, &ke) {
		t.Fatalf("bad jwks: %v, want *discovery.KeySetError", err)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
