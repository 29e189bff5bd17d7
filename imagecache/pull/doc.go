// Package pull fetches one image from its http or https origin into the
// image cache's ingest area and verifies it. The body is read once: each
// chunk is written to the data file and fed to SHA-256, and the file is
// never read back. Every CheckpointBytes the data is fdatasynced and then
// the hash state recorded next to it, so that a pull interrupted by a crash
// resumes with Range and If-Range (RFC 9110 sections 13.1.5 and 14) from
// the last durable byte. With a compression (zstd, RFC 8878; gzip, RFC
// 1952) the origin's bytes are decoded on the way and the decoded image is
// what is hashed and kept.
//
// A Pull that returns nil leaves a file whose size and digest are the
// wanted ones, fsynced and read-only; the caller (the cache) renames it
// into the blob directory, which it alone owns. The cache also says, through
// Space, how much a pull may write: the capacity, the disk space it must
// leave free, and the room it can make by evicting.
package pull
