// Package tftpd owns the appliance's read-only TFTP service of the
// first-stage boot files: what a PXE ROM fetches after the proxyDHCP
// answer and before it runs iPXE.
//
// It speaks TFTP as RFC 1350 defines it, with option negotiation
// (RFC 2347) of blksize (RFC 2348), tsize (RFC 2349) and windowsize
// (RFC 7440: up to MaxWindowSize DATA packets, and 64 KiB, before an
// ACK). The request loop and the windowed sender are this package's own
// (pin/tftp/v3 opens a socket and starts a goroutine for every request
// before any handler can refuse it, so it cannot be bounded); netascii
// conversion is pin/tftp's. Every transfer runs from a fresh UDP port.
// Unknown options such as timeout are left out of the OACK, which
// RFC 2347 allows.
//
// Only files of the Files set are served, by exact name after at most one
// leading "/" is dropped; write requests, unknown names and any path trick
// are answered with a TFTP ERROR packet from the listening socket.
//
// Every per-client resource is bounded: at most MaxTransfers transfers run
// at once and at most MaxPerSource per client address; a request beyond
// either, a repeat of a request from the same address and port for the
// same file while its transfer runs, and a malformed datagram are dropped
// without an answer and without opening anything. When MaxTransfers are
// running, the oldest transfer whose client has acknowledged nothing for
// 500 ms (a request with a forged source never is) gives its place to a
// new request, so forged requests cannot hold every place for the length
// of their timeouts. Running out of file descriptors drops the request
// too and is logged as what it is. Log
// lines are rate-limited per reason, with the number suppressed; every
// transfer and drop is counted in siteboot_tftp_* metrics.
package tftpd
