package discovery

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// assertionVector is testdata/assertion-vector.json, made with the Python
// standard library (testdata/gen-assertion-vector.py) from sig-vectors.json.
type assertionVector struct {
	JWKS          string `json:"jwks"`
	AssertionText string `json:"assertion_text"`
}

func loadAssertionVector(t testing.TB) assertionVector {
	t.Helper()
	data, err := os.ReadFile("testdata/assertion-vector.json")
	if err != nil {
		t.Fatal(err)
	}
	var v assertionVector
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The JWKS siteboot writes for the vector key is the one made outside it,
// byte for byte, and parses back to the same key.
func TestJWKSVector(t *testing.T) {
	v := loadVectors(t)
	av := loadAssertionVector(t)
	pub, err := ParsePublicKeyPEM([]byte(v.PublicKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewKeySet(pub, pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := set.MarshalJWKS()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(av.JWKS, string(got)); diff != "" {
		t.Fatalf("JWKS (-vector +got):\n%s", diff)
	}
	parsed, err := ParseJWKS([]byte(av.JWKS))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{v.KID}, parsed.KIDs()); diff != "" {
		t.Fatalf("kids (-want +got):\n%s", diff)
	}
	if k, ok := parsed.Lookup(v.KID); !ok || !k.Equal(pub) {
		t.Fatalf("Lookup(%s) = %v, %t; want the vector key", v.KID, k, ok)
	}
}

func TestJWKSRoundTripSorted(t *testing.T) {
	a, b := newTestSigner(t), newTestSigner(t)
	set, err := NewKeySet(a.Public(), b.Public())
	if err != nil {
		t.Fatal(err)
	}
	data, err := set.MarshalJWKS()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJWKS(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.KID(), b.KID()}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if diff := cmp.Diff(want, back.KIDs()); diff != "" {
		t.Fatalf("kids (-want +got):\n%s", diff)
	}
	empty, err := (&KeySet{}).MarshalJWKS()
	if err != nil || string(empty) != `{"keys":[]}` {
		t.Fatalf("empty set = %s, %v", empty, err)
	}
}

// Every refusal names the bad key and member; nothing half-parsed comes
// back.
func TestParseJWKSRefusals(t *testing.T) {
	v := loadVectors(t)
	good := jwkOf(t, v)
	other := newTestSigner(t)
	otherJWK := jwkFromSigner(t, other)
	// A point off the curve: y+1.
	offCurve := good
	yb, _ := decodeB64URL(good.Y)
	yb[31] ^= 1
	offCurve.Y = encB64URL(yb)

	tests := []struct {
		name string
		data string
		want string
	}{
		{"not json", `{"keys":`, "not a JSON JWK Set"},
		{"no keys", `{"keys":[]}`, "no keys"},
		{"no keys member", `{}`, "no keys"},
		{"trailing data", setOf(t, good) + "x", "not a JSON JWK Set"},
		{"key not an object", `{"keys":[1]}`, "keys[0]: not a JWK object"},
		{"set not an object", `[]`, "not a JSON JWK Set"},
		{"RSA", setOf(t, with(good, func(k *jwk) { k.Kty = "RSA" })), `keys[0]: kty "RSA"`},
		{"P-384", setOf(t, with(good, func(k *jwk) { k.Crv = "P-384" })), `keys[0]: crv "P-384"`},
		{"enc key", setOf(t, with(good, func(k *jwk) { k.Use = "enc" })), `use "enc"`},
		{"other alg", setOf(t, with(good, func(k *jwk) { k.Alg = "ES384" })), `alg "ES384"`},
		{"private key", setOf(t, with(good, func(k *jwk) { k.D = "AAAA" })), "private key"},
		{"no kid", setOf(t, with(good, func(k *jwk) { k.Kid = "" })), "kid: missing"},
		{"kid of another key", setOf(t, with(good, func(k *jwk) { k.Kid = other.KID() })), "is not the key's kid"},
		{"long kid quoted cut", setOf(t, with(good, func(k *jwk) { k.Kid = strings.Repeat("k", 3000) })), `… (3000 bytes) is not the key's kid`},
		{"kid swapped between keys", setOf(t, good, with(otherJWK, func(k *jwk) { k.Kid = v.KID })), `keys[1]: kid "` + v.KID + `" is not the key's kid`},
		{"duplicate kid", setOf(t, otherJWK, good, otherJWK), "keys[2]: kid " + `"` + other.KID() + `" appears twice`},
		{"x short", setOf(t, with(good, func(k *jwk) { k.X = k.X[:42] })), "x: want unpadded base64url of 32 bytes"},
		{"x padded", setOf(t, with(good, func(k *jwk) { k.X += "=" })), "x: want unpadded"},
		{"x std base64", setOf(t, with(good, func(k *jwk) { k.X = strings.ReplaceAll(strings.ReplaceAll(k.X, "-", "+"), "_", "/") + "+/" })), "x: want"},
		{"y with newline", setOf(t, with(good, func(k *jwk) { k.Y = k.Y[:20] + "\n" + k.Y[20:] })), "y: want"},
		{"off the curve", setOf(t, offCurve), "not a point on P-256"},
		{"member names in another case", strings.Replace(setOf(t, good), `"kty"`, `"KTY"`, 1), `kty "": want EC`},
		{"keys in another case", strings.Replace(setOf(t, good), `"keys"`, `"Keys"`, 1), "no keys"},
		{"keys not an array", `{"keys":{}}`, "keys: not an array"},
		{"kid not a string", strings.Replace(setOf(t, good), `"kid":"`+good.Kid+`"`, `"kid":1`, 1), "keys[0]: kid: not a string"},
		{"private key, not a string", strings.Replace(setOf(t, good), `"kty"`, `"d":{},"kty"`, 1), "private key"},
		{"too large", `{"keys":[` + strings.Repeat(" ", MaxJWKSBytes) + `]}`, "larger than"},
		{"too many keys", setOf(t, slices.Repeat([]jwk{good}, MaxJWKSKeys+1)...), "129 keys, more than 128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseJWKS([]byte(tt.data))
			var ke *KeySetError
			if !errors.As(err, &ke) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseJWKS = %v, %v; want *KeySetError containing %q", set, err, tt.want)
			}
			if set != nil {
				t.Fatalf("a refused set came back: %v", set.KIDs())
			}
		})
	}
	// Members it does not know, and no use or alg, are fine.
	if _, err := ParseJWKS([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"` + good.X + `","y":"` + good.Y + `","kid":"` + good.Kid + `","x5c":[],"key_ops":["verify"]}],"extra":1}`)); err != nil {
		t.Fatalf("a set with extra members: %v", err)
	}
}

func jwkOf(t *testing.T, v sigVectors) jwk {
	t.Helper()
	return jwkFromSigner(t, vectorSigner(t, v))
}

func jwkFromSigner(t *testing.T, s *Signer) jwk {
	t.Helper()
	data, err := mustSet(t, s.Public()).MarshalJWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set jwks
	if err := json.Unmarshal(data, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("%s: %v", data, err)
	}
	return set.Keys[0]
}

func mustSet(t testing.TB, pubs ...*ecdsa.PublicKey) *KeySet {
	t.Helper()
	s, err := NewKeySet(pubs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func encB64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func with(k jwk, f func(*jwk)) jwk { f(&k); return k }

func setOf(t *testing.T, keys ...jwk) string {
	t.Helper()
	b, err := json.Marshal(jwks{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParseJWKS: any bytes are refused with a *KeySetError or give a set
// that encodes and parses back to the same kids, each the KeyID of its key.
func FuzzParseJWKS(f *testing.F) {
	v := loadAssertionVector(f)
	f.Add([]byte(v.JWKS))
	f.Add([]byte(`{"keys":[]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":"","kid":"a"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := ParseJWKS(data)
		if err != nil {
			var ke *KeySetError
			if !errors.As(err, &ke) {
				t.Fatalf("refusal is %T, not *KeySetError: %v", err, err)
			}
			return
		}
		for _, kid := range set.KIDs() {
			k, _ := set.Lookup(kid)
			if got, err := KeyID(k); err != nil || got != kid {
				t.Fatalf("kid %q holds a key whose kid is %q (%v)", kid, got, err)
			}
		}
		again, err := set.MarshalJWKS()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseJWKS(again)
		if err != nil {
			t.Fatalf("re-encoded set refused: %v", err)
		}
		if diff := cmp.Diff(set.KIDs(), back.KIDs()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
