package imagecache

import (
	"bytes"
	"github.com/siteboot/siteboot/internal/metrictest"
	"net/http"
	"strings"
	"testing"
)

// A Want that carries the catalog's size bounds the pull by it: a
// decompressing pull (a zip bomb: 64 MiB of zeros in 64 KiB of gzip) stops
// as soon as the decoded data passes it, and an origin that announces
// another size is refused before a byte is written.
func TestWantSizeBoundsThePull(t *testing.T) {
	bomb := gzipOf(t, make([]byte, 64<<20))
	plain := testBytes(84, 100_000)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/bomb.gz" {
			serveBytes(w, r, bomb, "")
			return
		}
		serveBytes(w, r, plain, "")
	})
	for _, tc := range []struct {
		name   string
		want   Want
		reason string // "" ready
	}{
		{"decompressed past the size", Want{URL: o.url("bomb.gz"), SHA256: digestOf([]byte("what the catalog says")),
			Compression: CompressionGzip, Size: 1 << 20}, "larger than the 1048576 bytes the catalog gives it"},
		{"origin announces another size", Want{URL: o.url("plain"), SHA256: digestOf(plain), Size: 99_999},
			"origin announces 100000 bytes, the catalog 99999"},
		{"size matches", Want{URL: o.url("plain"), SHA256: digestOf(plain), Size: 100_000}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := openCache(t, testConfig(t))
			runCache(t, c)
			if err := c.Add(tc.want); err != nil {
				t.Fatal(err)
			}
			if tc.reason == "" {
				waitReady(t, c, tc.want.SHA256)
				return
			}
			if reason := waitFailed(t, c, tc.want.SHA256); !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q, want containing %q", reason, tc.reason)
			}
			if got := metrictest.Counter(t, c.m.pullBytes); got > float64(tc.want.Size) {
				t.Errorf("the pull wrote %v bytes, past the %d the catalog gives", got, tc.want.Size)
			}
		})
	}
	if err := (Want{URL: o.url("x"), SHA256: digestOf(plain), Size: -1}).Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("size -1")) {
		t.Errorf("Validate of a negative size = %v", err)
	}
}
