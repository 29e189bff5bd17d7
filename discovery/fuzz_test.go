package discovery

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeLedger: any file content either decodes into machines that
// encode back to the same bytes, or is refused; it never panics.
func FuzzDecodeLedger(f *testing.F) {
	ms := []machine{
		{mac: macA, uuid: uuid1, arch: "bios", relay: "10.0.0.1", first: t0, last: t0.Add(time.Minute), count: 3},
		{mac: macB, first: t0, last: t0, count: 1},
	}
	seed, err := encodeLedger(ms)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-4])
	f.Add([]byte(ledgerMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLedgerRoundTrip(t, data)
		// The same bytes with a valid checksum reach the record parser.
		checkLedgerRoundTrip(t, binary.BigEndian.AppendUint32(bytes.Clone(data), crc32.Checksum(data, castagnoli)))
	})
}

func checkLedgerRoundTrip(t *testing.T, data []byte) {
	t.Helper()
	got, err := decodeLedger(data)
	if err != nil {
		return
	}
	again, err := encodeLedger(got)
	if err != nil {
		t.Fatalf("decoded ledger does not encode: %v", err)
	}
	back, err := decodeLedger(again)
	if err != nil {
		t.Fatalf("re-encoded ledger does not decode: %v", err)
	}
	if diff := cmp.Diff(got, back, cmp.AllowUnexported(machine{})); diff != "" {
		t.Fatalf("round trip (-first +second):\n%s", diff)
	}
}

// FuzzVerifyAssertion: wire bytes of a SignedDiscoveryAssertion never make
// VerifyAssertion panic, and whatever it accepts carries exactly the body
// the vector key signed.
func FuzzVerifyAssertion(f *testing.F) {
	v := loadVectors(f)
	pub, err := ParsePublicKeyPEM([]byte(v.PublicKeyPEM))
	if err != nil {
		f.Fatal(err)
	}
	vec := v.Vectors[0]
	signedBody := mustHex(f, vec.PartsHex[0])
	genuine, err := proto.Marshal(&sitev1.SignedDiscoveryAssertion{
		Body: signedBody,
		Sig:  &commonv1.Signature{Kid: v.KID, Sig: mustHex(f, vec.SigHex)},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(genuine)
	f.Fuzz(func(t *testing.T, wire []byte) {
		sa := &sitev1.SignedDiscoveryAssertion{}
		if proto.Unmarshal(wire, sa) != nil {
			return
		}
		a, err := VerifyAssertion(pub, sa)
		if err != nil {
			return
		}
		if !bytes.Equal(sa.GetBody(), signedBody) {
			t.Fatalf("accepted a body the key never signed: %x", sa.GetBody())
		}
		if a.GetMac() != "52:54:00:12:34:56" {
			t.Fatalf("accepted assertion decodes to %v", a)
		}
	})
}
