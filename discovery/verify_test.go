package discovery

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// vectorIssued is the vector assertion's issued_at.
var vectorIssued = time.Unix(1767225600, 0)

// The text made outside siteboot verifies against the JWKS made outside
// it, and decodes to the vector assertion; the policy refuses it when it
// should.
func TestVerifyAssertionTextVector(t *testing.T) {
	av := loadAssertionVector(t)
	keys, err := ParseJWKS([]byte(av.JWKS))
	if err != nil {
		t.Fatal(err)
	}
	kid := loadVectors(t).KID
	tests := []struct {
		name       string
		policy     VerifyPolicy
		wantReason string // "" = valid
	}{
		{"valid", VerifyPolicy{Keys: keys, Now: vectorIssued.Add(time.Minute), MinEpoch: 7}, ""},
		{"just before not_after", VerifyPolicy{Keys: keys, Now: vectorIssued.Add(time.Hour - time.Nanosecond)}, ""},
		{"issued within the skew", VerifyPolicy{Keys: keys, Now: vectorIssued.Add(-MaxClockSkew)}, ""},
		{"at not_after", VerifyPolicy{Keys: keys, Now: vectorIssued.Add(time.Hour)}, ReasonExpired},
		{"issued in the future", VerifyPolicy{Keys: keys, Now: vectorIssued.Add(-MaxClockSkew - time.Second)}, ReasonNotYetValid},
		{"epoch below the minimum", VerifyPolicy{Keys: keys, Now: vectorIssued, MinEpoch: 8}, ReasonStaleEpoch},
		{"another site's keys", VerifyPolicy{Keys: mustSet(t, newTestSigner(t).Public()), Now: vectorIssued}, ReasonUnknownKey},
		{"no keys", VerifyPolicy{Now: vectorIssued}, ReasonUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := VerifyAssertionText(av.AssertionText, tt.policy)
			if c.KID != kid {
				t.Errorf("KID = %q, want %q", c.KID, kid)
			}
			if tt.wantReason == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else if r := reasonOf(err); r != tt.wantReason {
				t.Fatalf("err = %v; want reason %s", err, tt.wantReason)
			}
			if tt.wantReason == ReasonUnknownKey {
				if c.Assertion != nil {
					t.Fatal("an assertion whose signature was not checked came back")
				}
				return
			}
			if diff := cmp.Diff(vectorAssertion(), c.Assertion, protocmp.Transform()); diff != "" {
				t.Fatalf("assertion (-want +got):\n%s", diff)
			}
		})
	}
}

func reasonOf(err error) string {
	var ae *AssertionError
	if !errors.As(err, &ae) {
		return ""
	}
	return ae.Reason
}

// One changed character anywhere in the text is refused: the decoding
// admits one spelling of the bytes, and the signature covers the rest.
func TestVerifyAssertionTextEveryCharacter(t *testing.T) {
	av := loadAssertionVector(t)
	keys, _ := ParseJWKS([]byte(av.JWKS))
	p := VerifyPolicy{Keys: keys, Now: vectorIssued}
	text := av.AssertionText
	for i := range len(text) {
		sub := byte('A')
		if text[i] == 'A' {
			sub = 'B'
		}
		changed := text[:i] + string(sub) + text[i+1:]
		c, err := VerifyAssertionText(changed, p)
		if err == nil {
			t.Fatalf("text with character %d changed %q→%q verified: %v", i, text[i], sub, c.Assertion)
		}
		if reasonOf(err) == "" {
			t.Fatalf("character %d: refusal is not an *AssertionError: %v", i, err)
		}
	}
}

func TestVerifyAssertionTextMalformed(t *testing.T) {
	s := newTestSigner(t)
	keys := mustSet(t, s.Public())
	sa, err := s.SignAssertion(vectorAssertion())
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := proto.MarshalOptions{Deterministic: true}.Marshal(sa)
	good := base64.RawURLEncoding.EncodeToString(wire)
	if _, err := VerifyAssertionText(good, VerifyPolicy{Keys: keys, Now: vectorIssued}); err != nil {
		t.Fatalf("genuine text: %v", err)
	}
	enc := func(m proto.Message) string {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	unsigned := &sitev1.SignedDiscoveryAssertion{Body: sa.GetBody()}
	noBody := &sitev1.SignedDiscoveryAssertion{Sig: sa.GetSig()}
	withChain := proto.CloneOf(sa)
	withChain.Sig.Chain = [][]byte{{1}}
	tests := []struct {
		name, text, want string
		reason           string
	}{
		{"empty", "", "empty", ReasonMalformed},
		{"padded", good + "==", "not unpadded base64url", ReasonMalformed},
		{"standard alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+", "not unpadded base64url", ReasonMalformed},
		{"percent-encoded", "%41" + good, "not unpadded base64url", ReasonMalformed},
		{"line break inside", good[:10] + "\n" + good[10:], "not unpadded base64url", ReasonMalformed},
		{"surrounding space", " " + good, "not unpadded base64url", ReasonMalformed},
		{"too long", strings.Repeat("A", MaxAssertionText+1), "longer than", ReasonMalformed},
		{"not protobuf", "____", "not a SignedDiscoveryAssertion", ReasonMalformed},
		{"no signature", enc(unsigned), "no signature", ReasonMalformed},
		{"no body", enc(noBody), "no body", ReasonMalformed},
		{"unknown field", base64.RawURLEncoding.EncodeToString(protowire.AppendVarint(protowire.AppendTag(wire, 9, protowire.VarintType), 1)), "unknown fields", ReasonMalformed},
		{"fields out of order", base64.RawURLEncoding.EncodeToString(reorder(t, wire)), "deterministic encoding", ReasonMalformed},
		{"signature chain added", enc(withChain), "chain", ReasonMalformed}, // unsigned bytes an appliance never writes
		{"kid changed", enc(&sitev1.SignedDiscoveryAssertion{Body: sa.GetBody(), Sig: &commonv1.Signature{Kid: "x", Sig: sa.GetSig().GetSig()}}), "kid", ReasonUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyAssertionText(tt.text, VerifyPolicy{Keys: keys, Now: vectorIssued})
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if reasonOf(err) != tt.reason || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %s containing %q", err, tt.reason, tt.want)
			}
		})
	}
}

// reorder puts the sig field (2) before the body (1): the same message,
// not the encoding an appliance writes.
func reorder(t *testing.T, wire []byte) []byte {
	t.Helper()
	var fields [][]byte
	for b := wire; len(b) > 0; {
		_, _, n := protowire.ConsumeField(b)
		if n < 0 {
			t.Fatal("bad wire")
		}
		fields = append(fields, b[:n])
		b = b[n:]
	}
	if len(fields) != 2 {
		t.Fatalf("%d fields", len(fields))
	}
	return append(append([]byte{}, fields[1]...), fields[0]...)
}

// A signature by a member's key over a body some other key signed, or
// over a changed body, is bad-signature, and nothing decoded comes back.
func TestVerifyAssertionTextBadSignature(t *testing.T) {
	s, other := newTestSigner(t), newTestSigner(t)
	keys := mustSet(t, s.Public(), other.Public())
	sa, _ := s.SignAssertion(vectorAssertion())
	forged := proto.CloneOf(sa)
	forged.Sig.Kid = other.KID() // claims the other member signed it
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(forged)
	c, err := VerifyAssertionText(base64.RawURLEncoding.EncodeToString(b), VerifyPolicy{Keys: keys, Now: vectorIssued})
	if reasonOf(err) != ReasonBadSignature || c.Assertion != nil {
		t.Fatalf("forged kid: %v, %v; want bad-signature and no assertion", c.Assertion, err)
	}
}

// FuzzVerifyAssertionText: any text is refused with an *AssertionError or
// carries exactly the body the vector key signed.
func FuzzVerifyAssertionText(f *testing.F) {
	av := loadAssertionVector(f)
	keys, err := ParseJWKS([]byte(av.JWKS))
	if err != nil {
		f.Fatal(err)
	}
	signedBody := mustHex(f, loadVectors(f).Vectors[0].PartsHex[0])
	f.Add(av.AssertionText)
	f.Add(av.AssertionText[:len(av.AssertionText)-1])
	f.Add("")
	p := VerifyPolicy{Keys: keys, Now: vectorIssued}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := VerifyAssertionText(text, p)
		if err != nil {
			if reasonOf(err) == "" {
				t.Fatalf("refusal is not an *AssertionError: %v", err)
			}
			return
		}
		body, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c.Assertion)
		if string(body) != string(signedBody) {
			t.Fatalf("accepted an assertion the key never signed: %v", c.Assertion)
		}
	})
}

// Not run in CI timing; `go test -run '^$' -bench Assertion -benchtime=2000x ./discovery/`.
func BenchmarkSignAssertion(b *testing.B) {
	s := vectorSigner(b, loadVectors(b))
	a := vectorAssertion()
	for b.Loop() {
		if _, err := s.SignAssertion(a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyAssertionText(b *testing.B) {
	av := loadAssertionVector(b)
	keys, err := ParseJWKS([]byte(av.JWKS))
	if err != nil {
		b.Fatal(err)
	}
	p := VerifyPolicy{Keys: keys, Now: vectorIssued}
	for b.Loop() {
		if _, err := VerifyAssertionText(av.AssertionText, p); err != nil {
			b.Fatal(err)
		}
	}
}

// An unknown kid is quoted cut in the refusal: the text's sender chose it,
// and %q of control bytes is four times their length.
func TestVerifyAssertionTextQuotesLongKIDCut(t *testing.T) {
	s := newTestSigner(t)
	sa, _ := s.SignAssertion(vectorAssertion())
	long := proto.CloneOf(sa)
	long.Sig.Kid = strings.Repeat("\x01", 3000)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(long)
	_, err := VerifyAssertionText(base64.RawURLEncoding.EncodeToString(b), VerifyPolicy{Keys: mustSet(t, s.Public()), Now: vectorIssued})
	if reasonOf(err) != ReasonUnknownKey {
		t.Fatalf("3000-byte kid: %v; want unknown-key", err)
	}
	if n := len(err.Error()); n > 512 {
		t.Fatalf("refusal is %d bytes, want at most 512: the kid is quoted whole", n)
	}
}
