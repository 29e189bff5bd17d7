package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Bounds of a key set (JWKS) ParseJWKS accepts. One P-256 JWK is about 200
// bytes; a site has a handful of members (the raft log keeps at most 64
// member keys, and an appliance adds its own).
const (
	MaxJWKSBytes = 64 << 10
	MaxJWKSKeys  = 128
)

// coordLen is the length of a P-256 coordinate in a JWK (RFC 7518 6.2.1.2).
const coordLen = 32

// jwk is one key of a JWKS as siteboot writes it (RFC 7517, RFC 7518 6.2).
// D is read only to refuse a set that carries a private key.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	D   string `json:"d,omitempty"`
}

type jwks struct {
	Keys []jwk `json:"keys"`
}

// KeySetError is a key set (JWKS) that ParseJWKS refused. Key is the index
// of the offending key, -1 when the set as a whole is wrong.
type KeySetError struct {
	Key    int
	Reason string
}

func (e *KeySetError) Error() string {
	if e.Key < 0 {
		return "discovery: key set: " + e.Reason
	}
	return fmt.Sprintf("discovery: key set: keys[%d]: %s", e.Key, e.Reason)
}

// KeySet is a set of P-256 public keys by kid. The zero value is empty.
// It is immutable once built, so safe for concurrent use.
type KeySet struct {
	kids []string // sorted
	keys map[string]*ecdsa.PublicKey
}

// NewKeySet builds a set from public keys; a key given twice is kept once.
func NewKeySet(pubs ...*ecdsa.PublicKey) (*KeySet, error) {
	s := &KeySet{keys: make(map[string]*ecdsa.PublicKey, len(pubs))}
	for i, pub := range pubs {
		kid, err := KeyID(pub)
		if err != nil {
			return nil, fmt.Errorf("discovery: key set: key %d: %w", i, err)
		}
		if _, dup := s.keys[kid]; !dup {
			s.keys[kid] = pub
			s.kids = append(s.kids, kid)
		}
	}
	slices.Sort(s.kids)
	return s, nil
}

// Lookup returns the key named kid.
func (s *KeySet) Lookup(kid string) (*ecdsa.PublicKey, bool) {
	if s == nil {
		return nil, false
	}
	k, ok := s.keys[kid]
	return k, ok
}

// KIDs returns the kids of the set, sorted.
func (s *KeySet) KIDs() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.kids)
}

// MarshalJWKS encodes the set as an RFC 7517 JWK Set, keys sorted by kid:
// each {"kty":"EC","crv":"P-256","x","y","kid","use":"sig","alg":"ES256"},
// x and y unpadded base64url of 32 bytes each, kid as KeyID.
func (s *KeySet) MarshalJWKS() ([]byte, error) {
	out := jwks{Keys: []jwk{}}
	for _, kid := range s.KIDs() {
		raw, err := s.keys[kid].Bytes() // 0x04 ‖ x ‖ y
		if err != nil || len(raw) != 1+2*coordLen {
			return nil, fmt.Errorf("discovery: key set: encode %s: not a valid P-256 key", kid)
		}
		enc := base64.RawURLEncoding
		out.Keys = append(out.Keys, jwk{
			Kty: "EC", Crv: "P-256", Kid: kid, Use: "sig", Alg: "ES256",
			X: enc.EncodeToString(raw[1 : 1+coordLen]), Y: enc.EncodeToString(raw[1+coordLen:]),
		})
	}
	return json.Marshal(out)
}

// ParseJWKS reads an RFC 7517 JWK Set of P-256 signing keys, strictly: at
// most MaxJWKSBytes and MaxJWKSKeys; at least one key; every key kty "EC",
// crv "P-256", x and y unpadded base64url of exactly 32 bytes naming a
// point on the curve, no private part (d), use "sig" and alg "ES256" when
// present, and a kid equal to the KeyID of that key; no kid twice. Members
// it does not know are ignored (RFC 7517 4). Every refusal is a
// *KeySetError.
func ParseJWKS(data []byte) (*KeySet, error) {
	if len(data) > MaxJWKSBytes {
		return nil, &KeySetError{Key: -1, Reason: fmt.Sprintf("%d bytes is larger than %d", len(data), MaxJWKSBytes)}
	}
	// Member names are matched exactly (RFC 7517 4), not the way
	// encoding/json matches struct fields, ignoring case.
	var top map[string]json.RawMessage
	var keys []json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, &KeySetError{Key: -1, Reason: "not a JSON JWK Set: " + err.Error()}
	}
	if raw, ok := top["keys"]; ok {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, &KeySetError{Key: -1, Reason: "keys: not an array"}
		}
	}
	switch {
	case len(keys) == 0:
		return nil, &KeySetError{Key: -1, Reason: `no keys (want {"keys":[…]})`}
	case len(keys) > MaxJWKSKeys:
		return nil, &KeySetError{Key: -1, Reason: fmt.Sprintf("%d keys, more than %d", len(keys), MaxJWKSKeys)}
	}
	s := &KeySet{keys: make(map[string]*ecdsa.PublicKey, len(keys))}
	for i, raw := range keys {
		k, err := decodeJWK(raw)
		if err != nil {
			return nil, &KeySetError{Key: i, Reason: err.Error()}
		}
		pub, err := parseJWK(k)
		if err != nil {
			return nil, &KeySetError{Key: i, Reason: err.Error()}
		}
		if _, dup := s.keys[k.Kid]; dup {
			return nil, &KeySetError{Key: i, Reason: fmt.Sprintf("kid %s appears twice", quoteKID(k.Kid))}
		}
		s.keys[k.Kid] = pub
		s.kids = append(s.kids, k.Kid)
	}
	slices.Sort(s.kids)
	return s, nil
}

// decodeJWK reads the members of one key siteboot knows, by their exact
// names; a "d" member of any value marks a private key.
func decodeJWK(raw json.RawMessage) (jwk, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return jwk{}, errors.New("not a JWK object")
	}
	var k jwk
	if _, ok := m["d"]; ok {
		k.D = "present"
	}
	for name, dst := range map[string]*string{"kty": &k.Kty, "crv": &k.Crv, "x": &k.X, "y": &k.Y, "kid": &k.Kid, "use": &k.Use, "alg": &k.Alg} {
		if v, ok := m[name]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return jwk{}, fmt.Errorf("%s: not a string", name)
			}
		}
	}
	return k, nil
}

// parseJWK checks one key and returns it; errors name the member.
func parseJWK(k jwk) (*ecdsa.PublicKey, error) {
	switch {
	case k.D != "":
		return nil, errors.New(`d: the set holds a private key; publish public keys only`)
	case k.Kty != "EC":
		return nil, fmt.Errorf("kty %q: want EC", k.Kty)
	case k.Crv != "P-256":
		return nil, fmt.Errorf("crv %q: want P-256", k.Crv)
	case k.Use != "" && k.Use != "sig":
		return nil, fmt.Errorf("use %q: want sig", k.Use)
	case k.Alg != "" && k.Alg != "ES256":
		return nil, fmt.Errorf("alg %q: want ES256", k.Alg)
	case k.Kid == "":
		return nil, errors.New("kid: missing")
	}
	point := make([]byte, 1, 1+2*coordLen)
	point[0] = 4 // uncompressed
	for _, c := range []struct{ name, val string }{{"x", k.X}, {"y", k.Y}} {
		b, err := decodeB64URL(c.val)
		if err != nil || len(b) != coordLen {
			return nil, fmt.Errorf("%s: want unpadded base64url of %d bytes", c.name, coordLen)
		}
		point = append(point, b...)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, errors.New("x, y: not a point on P-256")
	}
	kid, err := KeyID(pub)
	if err != nil {
		return nil, err
	}
	if k.Kid != kid {
		return nil, fmt.Errorf("kid %s is not the key's kid %q", quoteKID(k.Kid), kid)
	}
	return pub, nil
}

// decodeB64URL decodes unpadded base64url, refusing every other spelling of
// the same bytes: a byte outside the alphabet (the decoder itself skips CR
// and LF), padding, or non-zero bits after the last byte.
func decodeB64URL(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, fmt.Errorf("byte %d (%q) is not base64url", i, c)
		}
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}
