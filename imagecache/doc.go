// Package imagecache owns the site's verified image cache: a content-addressed
// store of catalog images (SiteSpec.cache_images, bettercompute.site.v1
// CacheImage, and images added by an operator), the pulls that fill it,
// the HTTP range server for /cache/<sha256 hex> that iPXE sanboot and the
// provisioning ramdisks read from, LRU eviction under a byte capacity, and
// the ImagesSection / CachedImage status view (bettercompute.agent.v1,
// protocol reference section "ImagesSection").
//
// The invariant is that no code path returns a byte of an image whose
// SHA-256 has not been verified: bytes are served only from the blob
// directory, and a file gets there only by a rename after its data was
// fsynced and its streaming digest and size were compared with the wanted
// ones.
//
// The package is the store: the entries and their states, the index, the
// reconciliation with the disk at Open (load.go), the wanted set
// (wantset.go), eviction and disk space (evict.go, space.go), the workers
// (run.go) and the status views (status.go). Two sub-packages do the rest
// behind narrow seams: pull fetches and verifies one image into the ingest
// area given a Request (it never touches the blob directory; commit here
// renames its file in), and serve answers HTTP for the blobs through
// net/http and its fast path, seeing the store only as Acquire(digest) →
// (file, size, release), AcquireShared (the same with a descriptor held
// open per ready blob that responses read, for the fast path; closed when
// idle for a second or two) and Pending(digest) (blobs.go). The range and
// conditional-request rules are internal/httpfile's, shared with the boot
// files. README.md describes the on-disk layout and the semantics the
// appliance and the CLI build on.
package imagecache
