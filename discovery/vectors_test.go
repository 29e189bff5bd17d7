package discovery

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// sigVectors is testdata/sig-vectors.json, made with OpenSSL and Python
// (testdata/gen-sig-vectors.py), not with this package.
type sigVectors struct {
	PrivateKeyPEM string `json:"private_key_pem"`
	PublicKeyPEM  string `json:"public_key_pem"`
	KID           string `json:"kid"`
	Vectors       []struct {
		Name       string   `json:"name"`
		Purpose    string   `json:"purpose"`
		PartsHex   []string `json:"parts_hex"`
		MessageHex string   `json:"message_hex"`
		SigHex     string   `json:"sig_hex"`
	} `json:"vectors"`
}

func loadVectors(t testing.TB) sigVectors {
	t.Helper()
	data, err := os.ReadFile("testdata/sig-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v sigVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	return v
}

func vectorSigner(t testing.TB, v sigVectors) *Signer {
	t.Helper()
	key, err := parsePrivateKeyPEM([]byte(v.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVectorsKey(t *testing.T) {
	v := loadVectors(t)
	s := vectorSigner(t, v)
	if diff := cmp.Diff(v.KID, s.KID()); diff != "" {
		t.Errorf("KID (-vector +got):\n%s", diff)
	}
	if diff := cmp.Diff(v.PublicKeyPEM, string(s.PublicKeyPEM())); diff != "" {
		t.Errorf("PublicKeyPEM (-vector +got):\n%s", diff)
	}
}

func TestVectors(t *testing.T) {
	v := loadVectors(t)
	s := vectorSigner(t, v)
	pub, err := ParsePublicKeyPEM([]byte(v.PublicKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	for _, vec := range v.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			var parts [][]byte
			for _, p := range vec.PartsHex {
				parts = append(parts, mustHex(t, p))
			}
			msg, err := SigningMessage(vec.Purpose, parts...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(vec.MessageHex, hex.EncodeToString(msg)); diff != "" {
				t.Fatalf("message bytes (-vector +got):\n%s", diff)
			}
			// The OpenSSL-made signature verifies here.
			sig := &commonv1.Signature{Kid: v.KID, Sig: mustHex(t, vec.SigHex)}
			if err := Verify(pub, sig, vec.Purpose, parts...); err != nil {
				t.Fatalf("vector signature: %v", err)
			}
			// Ours verifies here and through the standard library's DER path.
			own, err := s.Sign(vec.Purpose, parts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(pub, own, vec.Purpose, parts...); err != nil {
				t.Fatalf("own signature: %v", err)
			}
			if !verifyDER(pub, msg, own.GetSig()) {
				t.Fatal("own signature does not verify as ASN.1 DER with crypto/ecdsa")
			}
		})
	}
}

func verifyDER(pub *ecdsa.PublicKey, msg, raw []byte) bool {
	der, err := asn1.Marshal(struct{ R, S *big.Int }{
		new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:]),
	})
	if err != nil {
		return false
	}
	digest := sha256.Sum256(msg)
	return ecdsa.VerifyASN1(pub, digest[:], der)
}

// TestVectorAssertionBody: the deterministic encoding SignAssertion uses
// gives the hand-encoded body of the discovery-assertion vector.
func TestVectorAssertionBody(t *testing.T) {
	v := loadVectors(t)
	var body []byte
	for _, vec := range v.Vectors {
		if vec.Purpose == PurposeDiscoveryAssertion {
			body = mustHex(t, vec.PartsHex[0])
		}
	}
	a := vectorAssertion()
	sa, err := vectorSigner(t, v).SignAssertion(a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hex.EncodeToString(body), hex.EncodeToString(sa.GetBody())); diff != "" {
		t.Fatalf("assertion body (-vector +got):\n%s", diff)
	}
	pub, _ := ParsePublicKeyPEM([]byte(v.PublicKeyPEM))
	got, err := VerifyAssertion(pub, sa)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got, protocmp.Transform()); diff != "" {
		t.Fatalf("verified assertion (-want +got):\n%s", diff)
	}
}

// vectorAssertion is what the discovery-assertion vector's body encodes.
func vectorAssertion() *sitev1.DiscoveryAssertion {
	return &sitev1.DiscoveryAssertion{
		SiteId: "site-a", SiteAgentNodeId: "appliance-1", BootLeaseEpoch: 7,
		Mac: "52:54:00:12:34:56", Ip: "10.0.0.50",
		ProductUuid: "8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2b", WorkflowId: "wf-42",
		IssuedAt: timestamppb.New(time.Unix(1767225600, 0)),
		NotAfter: timestamppb.New(time.Unix(1767229200, 0)),
	}
}
