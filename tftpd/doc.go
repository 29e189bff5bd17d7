// Package tftpd owns the appliance's read-only TFTP service of the
// first-stage boot files (DESIGN.md "Boot flow", step 2; PXE-NOTES.md
// rule 11).
//
// It speaks TFTP as RFC 1350 defines it, with option negotiation
// (RFC 2347) of blksize (RFC 2348) and tsize (RFC 2349), through
// github.com/pin/tftp/v3. Every transfer runs from a fresh UDP port.
// Unknown options such as windowsize (RFC 7440) are left out of the OACK,
// which RFC 2347 allows, so such clients fall back to lock-step transfer.
//
// Only files of the Files set are served, by exact name after at most one
// leading "/" is dropped; write requests, unknown names and any path trick
// are answered with a TFTP ERROR packet. Each transfer is logged in one
// line and counted in siteboot_tftp_* metrics.
package tftpd
