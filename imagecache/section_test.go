package imagecache

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestSection(t *testing.T) {
	cfg := testConfig(t)
	cfg.Capacity = 1 << 30
	c := openCache(t, cfg)
	base := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	put := func(d [32]byte, st State, size int64, used time.Time) {
		e := &entry{digest: d, state: st, size: size, lastUsed: used,
			want: Want{URL: "https://cat.example/i.iso?sig=x", ImageID: "img_" + hexOf(d)[:4], SHA256: d}}
		e.progress.Total.Store(-1)
		if st == StatePulling {
			e.progress.Total.Store(size)
			e.size = 0
		}
		c.entries[d] = e
	}
	ready, pulling, failed, evicting := digestOf([]byte("r")), digestOf([]byte("p")), digestOf([]byte("f")), digestOf([]byte("e"))
	put(ready, StateReady, 100, base.Add(59*time.Minute+59*time.Second))
	put(pulling, StatePulling, 500, time.Time{})
	put(failed, StateFailed, 0, time.Time{})
	put(evicting, StateEvicting, 30, base.Add(-time.Minute))
	got := c.Section()
	want := &agentv1.ImagesSection{CapacityBytes: 1 << 30, UsedBytes: 130}
	for _, ci := range []*agentv1.CachedImage{
		{Sha256: ready[:], SizeBytes: 100, State: agentv1.CachedImageState_CACHED_IMAGE_STATE_READY,
			LastUsed: timestamppb.New(base)},
		{Sha256: pulling[:], SizeBytes: 500, State: agentv1.CachedImageState_CACHED_IMAGE_STATE_PULLING},
		{Sha256: evicting[:], SizeBytes: 30, State: agentv1.CachedImageState_CACHED_IMAGE_STATE_EVICTING,
			LastUsed: timestamppb.New(base.Add(-time.Hour))},
	} {
		ci.Ref = "https://cat.example/i.iso"
		ci.ImageId = "img_" + hexOf([32]byte(ci.Sha256))[:4]
		want.Images = append(want.Images, ci)
	}
	slices.SortFunc(want.Images, func(a, b *agentv1.CachedImage) int { return bytes.Compare(a.Sha256, b.Sha256) })
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Section (-want +got):\n%s", diff)
	}
}

func TestSectionKeepsTheMostRecentlyUsed(t *testing.T) {
	c := openCache(t, testConfig(t))
	base := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	var newest [][]byte
	for i := range 1100 {
		d := digestOf([]byte{byte(i), byte(i >> 8)})
		e := &entry{digest: d, state: StateReady, size: 1, lastUsed: base.Add(time.Duration(i) * time.Hour)}
		c.entries[d] = e
		if i >= 100 {
			newest = append(newest, bytes.Clone(d[:]))
		}
	}
	got := c.Section()
	var gotDigests [][]byte
	for _, ci := range got.GetImages() {
		gotDigests = append(gotDigests, ci.GetSha256())
	}
	slices.SortFunc(newest, bytes.Compare)
	if diff := cmp.Diff(newest, gotDigests); diff != "" {
		t.Errorf("Section images (-want +got):\n%s", diff)
	}
}
