package appliance

import (
	"bytes"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/site"
)

// Every image the state machine holds is one the cache takes: syncImages
// hands the whole wanted set to SetWanted, which refuses it whole, so one
// image the cache refuses would fail every later write after it committed
// and stop the appliance at its next start.
func TestStateImagesAreOnesTheCacheTakes(t *testing.T) {
	d := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	wants := map[string]*statev1.ImageWant{
		"plain":         {Image: &sitev1.CacheImage{Url: "https://images.example/a.iso", Sha256: d(1)}},
		"zero digest":   {Image: &sitev1.CacheImage{Url: "https://images.example/a.iso", Sha256: d(0)}},
		"zstd":          {Image: &sitev1.CacheImage{Url: "http://h/a.zst", Sha256: d(2)}, Compression: "zstd", SourceSha256: d(3)},
		"zero source":   {Image: &sitev1.CacheImage{Url: "http://h/a.gz", Sha256: d(2)}, Compression: "gzip", SourceSha256: d(0)},
		"port only":     {Image: &sitev1.CacheImage{Url: "http://:80/a", Sha256: d(4)}},
		"opaque":        {Image: &sitev1.CacheImage{Url: "http:h/a", Sha256: d(4)}},
		"ipv6 host":     {Image: &sitev1.CacheImage{Url: "http://[fd00::1]:8080/a", Sha256: d(5)}},
		"query":         {Image: &sitev1.CacheImage{Url: "https://h/a?sig=x", Sha256: d(6)}},
		"bad escape":    {Image: &sitev1.CacheImage{Url: "https://h/a%zz", Sha256: d(6)}},
		"credentials":   {Image: &sitev1.CacheImage{Url: "https://u:p@h/a", Sha256: d(6)}},
		"unknown codec": {Image: &sitev1.CacheImage{Url: "https://h/a", Sha256: d(7)}, Compression: "xz"},
	}
	for name, w := range wants {
		if site.ValidateImageWant(w) != nil {
			continue
		}
		want, err := imagecache.FromCacheImage(w.GetImage())
		if err == nil {
			want.Compression, want.SourceSHA256 = w.GetCompression(), w.GetSourceSha256()
			err = want.Validate()
		}
		if err != nil {
			t.Errorf("%s: the state machine accepts it, the cache refuses it: %v", name, err)
		}
	}
}
