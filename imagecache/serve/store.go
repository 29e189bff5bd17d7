package serve

import "os"

// Blob is a verified image opened for one response.
type Blob struct {
	// File is the blob, at offset 0. The response closes it.
	File *os.File
	// Size is the verified size. Acquire returns a file it checked is
	// still the one verified (size included); the fast path relies on it.
	Size int64
	// Release ends the read: eviction waits for it. Call it once, after
	// the response.
	Release func()
	// InMemory, if not nil, reports whether every page of the file's
	// bytes [off, off+n) is in memory and read: sending them does not
	// wait for the disk. AcquireShared's blobs have it.
	InMemory func(off, n int64) bool
}

// Store is what serving needs of the image cache.
type Store interface {
	// Acquire opens the blob of digest when the image is ready and counts
	// a reader on it until Release. ok is false for an image that is not
	// ready; err is for one that is but whose file cannot be opened.
	Acquire(digest [32]byte) (b Blob, ok bool, err error)
	// AcquireShared is Acquire for the fast path: Blob.File is the blob's
	// file the store keeps open for it while it is ready, shared with
	// other responses. Read it only at an offset (sendfile with one,
	// ReadAt), never close it, and call Release once.
	AcquireShared(digest [32]byte) (b Blob, ok bool, err error)
	// Pending reports whether digest is on its way to ready (queued,
	// pulling, or being verified): 503 with Retry-After rather than 404.
	Pending(digest [32]byte) bool
}
