// Package imagecache owns the site's verified image cache: a content-addressed
// store of catalog images (SiteSpec.cache_images, bettercompute.site.v1
// CacheImage, and images added by an operator), the pulls that fill it, the
// HTTP range server for /cache/<sha256 hex> that iPXE sanboot and the
// provisioning ramdisks read from, LRU eviction under a byte capacity, and
// the ImagesSection / CachedImage status view (bettercompute.agent.v1,
// protocol reference section "ImagesSection").
//
// The invariant is that no code path returns a byte of an image whose
// SHA-256 has not been verified: bytes are served only from the blob
// directory, and a file gets there only by a rename after its data was
// fsynced and its streaming digest and size were compared with the wanted
// ones. Pulls hash while they write (one pass, no re-read) and checkpoint
// the hash state next to the data so that a pull resumes with Range and
// If-Range after a crash.
//
// Serving follows RFC 9110 (sections 13 and 14: conditional requests, Range,
// 206 and 416) with a strong ETag (the digest in hex) and hands the open
// file to the response writer's io.ReaderFrom, so the kernel's sendfile path
// carries the bytes. Listener is a fast path in front of net/http for the
// plain range reads of ready images that dominate a sanboot storm; it gives
// the same answers with less work per request and hands every other
// request to net/http. Decompress-on-pull reads zstd (RFC 8878) and gzip
// (RFC 1952) through github.com/klauspost/compress. README.md describes the
// on-disk layout and the semantics the appliance and the CLI build on.
package imagecache
