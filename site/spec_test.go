package site

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func digest(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func img(b byte) *sitev1.CacheImage {
	return &sitev1.CacheImage{Url: "https://images.example/" + string('a'+b%26) + ".iso", Sha256: digest(b), Format: "iso"}
}

func TestValidateSiteSpecRefusals(t *testing.T) {
	tests := []struct {
		name  string
		spec  *sitev1.SiteSpec
		field string
	}{
		{"no url", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Sha256: digest(1)}}}, "cache_images[0].url"},
		{"relative url", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Url: "a.iso", Sha256: digest(1)}}}, "cache_images[0].url"},
		{"short digest", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Url: "http://h/a", Sha256: digest(1)[:16]}}}, "cache_images[0].sha256"},
		{"zero digest", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Url: "http://h/a", Sha256: digest(0)}}}, "cache_images[0].sha256"},
		{"dup digest", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(1), img(1)}}, "cache_images[1].sha256"},
		{"bad format", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Url: "http://h/a", Sha256: digest(1), Format: "ISO 9660"}}}, "cache_images[0].format"},
		{"nil image", &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{nil}}, "cache_images[0]"},
		{"target no node", &sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{{Addresses: []string{"10.0.0.1"}}}}, "proxy_targets[0].node_id"},
		{"target no address", &sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "n1"}}}, "proxy_targets[0].addresses"},
		{"target bad address", &sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "n1", Addresses: []string{"http://x"}}}}, "proxy_targets[0].addresses[0]"},
		{"target dup", &sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "n1", Addresses: []string{"a"}}, {NodeId: "n1", Addresses: []string{"b"}}}}, "proxy_targets[1].node_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ValidateSiteSpec(tt.spec)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("ValidateSiteSpec = %v; want a field error on %s", err, tt.field)
			}
		})
	}
	ok := &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(1), {Url: "http://h/x.raw.zst", Sha256: digest(2), Format: "raw"}},
		ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "talos-1", Addresses: []string{"10.0.0.5", "fd00::5", "talos-1.site.example"}}}}
	if _, err := ValidateSiteSpec(ok); err != nil {
		t.Fatal(err)
	}
}

func TestApplySiteSpecReleases(t *testing.T) {
	s, st, _ := newTestStore()
	ctx := context.Background()
	if _, err := s.AddImage(ctx, &statev1.ImageWant{Image: img(3), Compression: "zstd", SourceSha256: digest(9)}); err != nil {
		t.Fatal(err)
	}
	if rel, err := s.ApplySiteSpec(ctx, &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(1), img(2), img(3)}}); err != nil || len(rel) != 0 {
		t.Fatalf("first apply released %x, %v", rel, err)
	}
	rel, err := s.ApplySiteSpec(ctx, &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(2)}})
	if err != nil {
		t.Fatal(err)
	}
	// 1 is released; 3 is still wanted by hand.
	if diff := cmp.Diff([][]byte{digest(1)}, rel); diff != "" {
		t.Fatalf("released (-want +got):\n%s", diff)
	}
	var got []string
	for _, w := range st.WantedImages() {
		got = append(got, w.GetImage().GetUrl()+"|"+w.GetCompression())
	}
	if diff := cmp.Diff([]string{img(2).GetUrl() + "|", img(3).GetUrl() + "|zstd"}, got); diff != "" {
		t.Fatalf("wanted (-want +got):\n%s", diff)
	}
	r, err := s.RemoveImage(ctx, digest(3))
	if err != nil || !r.Found || r.StillWanted {
		t.Fatalf("RemoveImage = %+v, %v", r, err)
	}
	if r, _ := s.RemoveImage(ctx, digest(2)); r.Found || !r.StillWanted {
		t.Fatalf("RemoveImage of a spec image = %+v; want not found, still wanted", r)
	}
	if _, err := s.RemoveImage(ctx, []byte{1}); err == nil {
		t.Fatal("RemoveImage of a 1-byte digest succeeded")
	}
	if diff := cmp.Diff([]*sitev1.CacheImage{img(2)}, st.Spec().GetCacheImages(), protocmp.Transform()); diff != "" {
		t.Fatalf("spec (-want +got):\n%s", diff)
	}
}

func TestImageWantRefusals(t *testing.T) {
	s, st, _ := newTestStore()
	for name, w := range map[string]*statev1.ImageWant{
		"image.url":     {Image: &sitev1.CacheImage{Sha256: digest(1)}},
		"compression":   {Image: img(1), Compression: "xz"},
		"source_sha256": {Image: img(1), SourceSha256: digest(2)},
		"image.sha256":  {Image: &sitev1.CacheImage{Url: "http://h/a", Sha256: digest(0)}},
	} {
		var fe *FieldError
		if _, err := s.AddImage(context.Background(), w); !errors.As(err, &fe) || fe.Field != name {
			t.Errorf("AddImage(%v) = %v; want a field error on %s", w, err, name)
		}
	}
	if len(st.WantedImages()) != 0 {
		t.Fatal("a refused image was stored")
	}
}

func TestSanbootNeedsReadyImage(t *testing.T) {
	s, st, _ := newTestStore()
	ctx := context.Background()
	_, err := s.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01", SanbootSha256: digest(0xee)}})
	var nr *NotReadyError
	if !errors.As(err, &nr) || nr.Field != "entries[0].sanboot_sha256" || !strings.Contains(err.Error(), "is not READY") {
		t.Fatalf("err = %v; want NotReadyError on entries[0].sanboot_sha256", err)
	}
	if e, _, _ := st.Counts(testNow); e != 0 {
		t.Fatal("the refused entry was stored")
	}
	mustPrepare(t, s, "n1", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:01", SanbootSha256: digest(7)})
	if _, pinned := st.SanbootDigests()[[32]byte(digest(7))]; !pinned {
		t.Fatal("sanboot digest not reported for pinning")
	}
}

func TestSpecSurvivesSnapshot(t *testing.T) {
	s, st, _ := newTestStore()
	ctx := context.Background()
	spec := &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{img(1)}, ProxyTargets: []*sitev1.ProxyTarget{{NodeId: "n", Addresses: []string{"10.1.1.1"}}}}
	if _, err := s.ApplySiteSpec(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddImage(ctx, &statev1.ImageWant{Image: img(4)}); err != nil {
		t.Fatal(err)
	}
	data, err := st.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r := NewState()
	if err := r.RestoreState(data); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st.Spec(), r.Spec(), protocmp.Transform()); diff != "" {
		t.Fatalf("spec after restore (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(st.WantedImages(), r.WantedImages(), protocmp.Transform()); diff != "" {
		t.Fatalf("wanted after restore (-want +got):\n%s", diff)
	}
	select {
	case <-r.Changed():
	default:
		t.Fatal("restore did not signal a change")
	}
}

// Hand-added images are bounded like the spec's, so a runaway client cannot
// grow the state (and every sync of the wanted set) without limit; a
// snapshot past the bound keeps the first MaxImages.
func TestHandAddedImagesAreBounded(t *testing.T) {
	want := func(i int) *statev1.ImageWant {
		d := make([]byte, 32)
		binary.BigEndian.PutUint32(d, uint32(i)+1)
		return &statev1.ImageWant{Image: &sitev1.CacheImage{Url: fmt.Sprintf("https://h/%d.iso", i), Sha256: d}}
	}
	add := func(i int) []byte {
		return mustMarshal(t, &statev1.SiteCommand{At: timestamppb.New(testNow),
			Op: &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: want(i)}}})
	}
	st := NewState()
	for i := range MaxImages {
		if err, failed := st.ApplyCommand(add(i)).(error); failed {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	before, _ := st.MarshalState()
	if res, ok := st.ApplyCommand(add(MaxImages)).(*LimitError); !ok {
		t.Fatalf("image %d past the bound: %v; want a *LimitError", MaxImages, res)
	}
	if after, _ := st.MarshalState(); !bytes.Equal(before, after) {
		t.Fatal("the refused image changed the state")
	}
	// Adding an image held already replaces it, at the bound too.
	if err, failed := st.ApplyCommand(add(0)).(error); failed {
		t.Fatalf("re-adding a held image: %v", err)
	}

	r := NewState()
	snap := &statev1.SiteState{Images: append(st.HandAddedImages(), want(MaxImages))}
	if err := r.RestoreState(mustMarshal(t, snap)); err != nil {
		t.Fatal(err)
	}
	if got := len(r.HandAddedImages()); got != MaxImages {
		t.Fatalf("restored %d hand-added images; want %d", got, MaxImages)
	}
}
