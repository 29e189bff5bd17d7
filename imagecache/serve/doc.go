// Package serve answers GET and HEAD /cache/<sha256 hex> for the image
// cache's verified blobs, through net/http (Handler) and through a fast
// path in front of it (Listener) that takes the plain range reads of a
// sanboot storm without net/http's per-request machinery and hands every
// other request to net/http. Both give the same answers: the conditional
// requests and the one range policy of internal/httpfile, a strong ETag
// (the digest in hex), the body sent with sendfile.
//
// The package sees the cache only through Store: Acquire opens the blob of
// a ready image and counts a reader on it until the Blob is released, so
// that eviction never deletes a file a response is reading (the fast path
// uses AcquireShared, a descriptor the cache holds open per ready blob
// while responses read it, read only at offsets, so that a response opens
// nothing); Pending tells a
// 503 (on its way) from a 404. The connections themselves (their number,
// and a deadline on every write that moves with progress) are bounded by
// the listener Listener wraps (internal/httpserver in the appliance).
package serve
