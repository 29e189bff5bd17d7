package site

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// Bounds on the site spec.
const (
	// MaxImages bounds the spec's cache_images, and the hand-added images
	// the state holds besides them.
	MaxImages       = 1000
	MaxProxyTargets = 10000
	maxAddresses    = 16
)

// Compressions a hand-added image may declare.
var compressions = map[string]bool{"": true, "zstd": true, "gzip": true}

// ValidateSiteSpec checks a site spec and returns a normalised copy. The
// boot lease field is kept as given: only an external lease source reads it.
func ValidateSiteSpec(in *sitev1.SiteSpec) (*sitev1.SiteSpec, error) {
	spec := in
	if spec == nil {
		spec = &sitev1.SiteSpec{}
	}
	if len(spec.GetCacheImages()) > MaxImages {
		return nil, fieldErr("cache_images", "%d images; at most %d", len(spec.GetCacheImages()), MaxImages)
	}
	seen := make(map[string]int)
	for i, img := range spec.GetCacheImages() {
		field := fmt.Sprintf("cache_images[%d]", i)
		if err := validateCacheImage(field, img); err != nil {
			return nil, err
		}
		key := string(img.GetSha256())
		if j, dup := seen[key]; dup {
			return nil, fieldErr(field+".sha256", "%s is also cache_images[%d].sha256", hex.EncodeToString(img.GetSha256()), j)
		}
		seen[key] = i
	}
	if err := validateProxyTargets(spec.GetProxyTargets()); err != nil {
		return nil, err
	}
	return proto.CloneOf(spec), nil
}

func validateCacheImage(field string, img *sitev1.CacheImage) error {
	if img == nil {
		return fieldErr(field, "is empty")
	}
	if img.GetUrl() == "" {
		return fieldErr(field+".url", "is required")
	}
	if err := validateHTTPURL(field+".url", img.GetUrl()); err != nil {
		return err
	}
	if len(img.GetSha256()) != 32 {
		return fieldErr(field+".sha256", "is %d bytes; a SHA-256 digest is 32", len(img.GetSha256()))
	}
	if [32]byte(img.GetSha256()) == ([32]byte{}) {
		return fieldErr(field+".sha256", "is all zeros, which is no image's digest")
	}
	f := img.GetFormat()
	if len(f) > 16 || strings.Trim(f, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return fieldErr(field+".format", "%q is not a format name (like iso, raw, qcow2)", f)
	}
	return nil
}

func validateProxyTargets(targets []*sitev1.ProxyTarget) error {
	if len(targets) > MaxProxyTargets {
		return fieldErr("proxy_targets", "%d targets; at most %d", len(targets), MaxProxyTargets)
	}
	seen := make(map[string]int)
	for i, pt := range targets {
		field := fmt.Sprintf("proxy_targets[%d]", i)
		if err := ValidateNodeID(field+".node_id", pt.GetNodeId()); err != nil {
			return err
		}
		if j, dup := seen[pt.GetNodeId()]; dup {
			return fieldErr(field+".node_id", "%q is also proxy_targets[%d].node_id", pt.GetNodeId(), j)
		}
		seen[pt.GetNodeId()] = i
		if len(pt.GetAddresses()) == 0 || len(pt.GetAddresses()) > maxAddresses {
			return fieldErr(field+".addresses", "needs 1 to %d addresses", maxAddresses)
		}
		for j, a := range pt.GetAddresses() {
			if !validHost(a) {
				return fieldErr(fmt.Sprintf("%s.addresses[%d]", field, j), "%q is neither an IP literal nor a DNS name", a)
			}
		}
	}
	return nil
}

// validHost accepts an IP literal or a DNS name (RFC 1123 labels).
func validHost(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// ValidateImageWant checks a hand-added image.
func ValidateImageWant(w *statev1.ImageWant) error {
	if err := validateCacheImage("image", w.GetImage()); err != nil {
		return err
	}
	if d := w.GetSourceSha256(); len(d) != 0 && len(d) != 32 {
		return fieldErr("source_sha256", "is %d bytes; a SHA-256 digest is 32", len(d))
	}
	if !compressions[w.GetCompression()] {
		return fieldErr("compression", "%q: want zstd, gzip or nothing", w.GetCompression())
	}
	if len(w.GetSourceSha256()) != 0 && w.GetCompression() == "" {
		return fieldErr("source_sha256", "is only meaningful with a compression")
	}
	return nil
}

// ValidateDigest checks a SHA-256 digest given as a field.
func ValidateDigest(field string, d []byte) error {
	if len(d) != 32 {
		return fieldErr(field, "is %d bytes; a SHA-256 digest is 32", len(d))
	}
	return nil
}
