package pull

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testData is the 1,000 bytes the checkpoint tests hash.
func testData() []byte { return bytes.Repeat([]byte("siteboot"), 125) }

// validCheckpoint is a checkpoint of the first n bytes of data.
func validCheckpoint(t testing.TB, data []byte, n int) checkpoint {
	h := sha256.New()
	h.Write(data[:n])
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256(data)
	return checkpoint{Version: 1, SHA256: hex.EncodeToString(d[:]), URL: "http://o/x", Offset: int64(n),
		Total: int64(len(data)), ETag: `"v1"`, HashState: state}
}

func TestDecodeCheckpoint(t *testing.T) {
	data := testData()
	d := sha256.Sum256(data)
	tests := []struct {
		name   string
		mutate func(*checkpoint)
		ok     bool
	}{
		{"valid", func(*checkpoint) {}, true},
		{"other image", func(c *checkpoint) { c.SHA256 = hex.EncodeToString(make([]byte, 32)) }, false},
		{"version", func(c *checkpoint) { c.Version = 2 }, false},
		{"offset past total", func(c *checkpoint) { c.Offset, c.Total = 10, 5 }, false},
		{"negative offset", func(c *checkpoint) { c.Offset = -1 }, false},
		{"offset not what was hashed", func(c *checkpoint) { c.Offset = 400 }, false},
		{"hash state cut", func(c *checkpoint) { c.HashState = c.HashState[:20] }, false},
		{"hash state of md5", func(c *checkpoint) { c.HashState = []byte("md5\x01garbage") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ck := validCheckpoint(t, data, 300)
			tt.mutate(&ck)
			raw, err := json.Marshal(ck)
			if err != nil {
				t.Fatal(err)
			}
			got, h, err := decodeCheckpoint(raw, d)
			if diff := cmp.Diff(tt.ok, err == nil); diff != "" {
				t.Fatalf("decodeCheckpoint error %v (-want ok +got ok):\n%s", err, diff)
			}
			if !tt.ok {
				return
			}
			if diff := cmp.Diff(ck, got); diff != "" {
				t.Errorf("decodeCheckpoint (-want +got):\n%s", diff)
			}
			h.Write(data[300:])
			if [32]byte(h.Sum(nil)) != d {
				t.Errorf("restored hash state does not continue to the image digest")
			}
		})
	}
}

func FuzzCheckpoint(f *testing.F) {
	data := testData()
	raw, _ := json.Marshal(validCheckpoint(f, data, 300))
	f.Add(raw)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"offset":-5,"total":-9}`))
	d := sha256.Sum256(data)
	f.Fuzz(func(t *testing.T, raw []byte) {
		ck, h, err := decodeCheckpoint(raw, d)
		if err != nil {
			return
		}
		if ck.Offset < 0 || ck.Total >= 0 && ck.Offset > ck.Total || h == nil {
			t.Fatalf("decodeCheckpoint accepted %+v", ck)
		}
	})
}
