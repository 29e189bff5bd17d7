package imagecache

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

func zstdOf(t *testing.T, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

func gzipOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecompressOnPull(t *testing.T) {
	// Compressible but not trivial: repeated random blocks.
	block := testBytes(20, 4096)
	data := bytes.Repeat(block, 64)
	other := bytes.Repeat(testBytes(21, 4096), 64)
	z, g := zstdOf(t, data), gzipOf(t, data)
	corrupt := bytes.Clone(z)
	corrupt[len(corrupt)/2] ^= 0xff
	sum := func(b []byte) []byte { s := sha256.Sum256(b); return s[:] }
	tests := []struct {
		name   string
		body   []byte
		kind   string
		source []byte
		state  State
		reason string
	}{
		{"zstd with source digest", z, CompressionZstd, sum(z), StateReady, ""},
		{"zstd without source digest", z, CompressionZstd, nil, StateReady, ""},
		{"gzip", g, CompressionGzip, sum(g), StateReady, ""},
		{"source digest mismatch", z, CompressionZstd, sum(g), StateFailed, "compressed bytes have sha256"},
		{"decoded digest mismatch", zstdOf(t, other), CompressionZstd, nil, StateFailed, "sha256 mismatch: the 262144 bytes"},
		{"corrupt zstd", corrupt, CompressionZstd, nil, StateFailed, "corrupt zstd stream"},
		{"not gzip", z, CompressionGzip, nil, StateFailed, "corrupt gzip stream"},
		{"trailing junk", append(bytes.Clone(g), "junk"...), CompressionGzip, nil, StateFailed, "corrupt gzip stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t, testConfig(t))
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, tt.body, "") })
			d := digestOf(data)
			if err := c.Add(Want{URL: o.url("img.iso.zst"), SHA256: d, Compression: tt.kind, SourceSHA256: tt.source}); err != nil {
				t.Fatal(err)
			}
			runCache(t, c)
			if tt.state == StateReady {
				waitReady(t, c, d)
				got, err := os.ReadFile(c.blobPath(d))
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("blob differs from the decompressed image (err %v)", err)
				}
				return
			}
			reason := waitFailed(t, c, d)
			if !strings.Contains(reason, tt.reason) {
				t.Errorf("reason %q, want containing %q", reason, tt.reason)
			}
			if n := len(o.requests()); n != 1 {
				t.Errorf("origin got %d requests; a corrupt stream is not retried", n)
			}
		})
	}
}

func TestWantValidate(t *testing.T) {
	d := digestOf([]byte("x"))
	tests := []struct {
		name string
		w    Want
		err  string
	}{
		{"ok", Want{URL: "https://h/x.iso", SHA256: d}, ""},
		{"http ok", Want{URL: "http://10.0.0.1:8080/x", SHA256: d}, ""},
		{"no digest", Want{URL: "https://h/x"}, "sha256 is required"},
		{"ftp", Want{URL: "ftp://h/x", SHA256: d}, "scheme must be http or https"},
		{"no host", Want{URL: "https:///x", SHA256: d}, "no host"},
		{"user info", Want{URL: "https://u:pw@h/x", SHA256: d}, "user info is not allowed"},
		{"unknown compression", Want{URL: "https://h/x", SHA256: d, Compression: "xz"}, "unknown compression"},
		{"source without compression", Want{URL: "https://h/x", SHA256: d, SourceSHA256: d[:]}, "needs a compression"},
		{"short source", Want{URL: "https://h/x", SHA256: d, Compression: "zstd", SourceSHA256: d[:5]}, "has 5 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.w.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				if strings.Contains(got, "pw") {
					t.Errorf("error leaks the password: %v", err)
				}
			}
			if tt.err == "" && got != "" || tt.err != "" && !strings.Contains(got, tt.err) {
				t.Errorf("Validate() = %q, want containing %q", got, tt.err)
			}
		})
	}
}

func TestFromCacheImage(t *testing.T) {
	d := digestOf([]byte("iso"))
	tests := []struct {
		name string
		in   *sitev1.CacheImage
		want Want
		err  string
	}{
		{"ok", &sitev1.CacheImage{Url: "https://h/a.iso", Sha256: d[:], Format: "iso"},
			Want{URL: "https://h/a.iso", SHA256: d, Format: "iso"}, ""},
		{"short digest", &sitev1.CacheImage{Url: "https://h/a.iso", Sha256: d[:31]}, Want{}, "sha256 has 31 bytes"},
		{"bad url", &sitev1.CacheImage{Url: "file:///etc/passwd", Sha256: d[:]},
			Want{URL: "file:///etc/passwd", SHA256: d}, "scheme must be http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromCacheImage(tt.in)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("error %v, want containing %q", err, tt.err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectCompression(t *testing.T) {
	got := []string{}
	for _, u := range []string{"https://h/a.iso.zst", "https://h/a.ZSTD", "https://h/a.img.gz?x=1", "https://h/a.iso", "::"} {
		got = append(got, DetectCompression(u))
	}
	want := []string{"zstd", "zstd", "gzip", "", ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
