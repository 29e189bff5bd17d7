// Command storm is siteboot's boot-storm load generator: it plays N
// machines booting at once as PXE firmware and iPXE do, each with its own
// MAC, SMBIOS UUID (option 97) and architecture (option 93: BIOS 0 or
// x86-64 UEFI 7), their starts spread over a window of a few seconds.
//
// Each machine goes through the steps of a real network boot:
//
//  1. pxe-dhcp: a PXE DHCPDISCOVER (option 60 PXEClient:Arch:…, broadcast),
//     retransmitted as firmware does (4, 8, 16, 32 s), until a proxy offer
//     (yiaddr 0, option 60 PXEClient); then, as edk2's PxeBcDxe does it
//     (PXE 2.1 §2.2.5-6), for BIOS and UEFI alike: an offer whose option
//     43 has discovery control bit 3 and that names a file (siteboot's)
//     is booted as it is; one with a boot menu (dnsmasq's to BIOS) has
//     its default item asked of the boot server option 43 lists, by a
//     DHCPREQUEST with sub-option 71 (type, layer 0) to its port 4011; one
//     without discovery options (dnsmasq's to UEFI) is asked again at its
//     next server's (else option 54's) port 4011 with no option 43. Those
//     requests carry the DISCOVER's options, the machine's address as
//     ciaddr and source, go from port 4011 (-pxe-listen) and are
//     retransmitted after 1, 2, 3, 4 s (-pxe-req-timeouts); the DHCPACK
//     names the first stage and next server;
//  2. first-stage: the first stage by TFTP (blksize 1468 and tsize, an edk2-
//     style tsize probe first, request and ACK retransmits on timeout, the
//     size checked against tsize) or, for UEFI HTTP boot (-uefi-http), by
//     HTTP from the URL the HTTPClient offer names. UEFI machines ask for
//     windowsize 4 (RFC 7440) as edk2 does (its probe: tsize, blksize and
//     windowsize; its download: blksize and windowsize) and acknowledge
//     each window, and the last block in order for every block they did
//     not expect, as edk2 does; BIOS machines transfer in lock step, as
//     PXE ROMs do;
//  3. ipxe-dhcp: iPXE's DISCOVER (option 77 "iPXE", same MAC and UUID) until
//     a proxy offer; when it has no "PXE options" (a next server and a
//     file, or a menu: iPXE's dhcp_has_pxeopts), iPXE's ProxyDHCPREQUEST
//     (option 54, ciaddr, broadcast flag) from port 68 to the proxy's
//     port 4011, retransmitted after 0.25, 0.5, 1, 2 s
//     (-ipxe-req-timeouts), ignoring answers without PXE options as iPXE
//     does; for an offer with a menu to boot, BIOS iPXE's menu boot: the
//     boot server request for the default item as above, but from port
//     68 with the broadcast flag (-ipxe-bs-timeouts 1, 2, 4 s), taking
//     only an ACK that echoes the item (EFI iPXE has no menu boot); the
//     last offer or ACK must name the script's http URL;
//  4. script: that script (/boot.ipxe), then what it chains (/ipxe?…) with
//     iPXE's variables (${mac}, ${uuid}, ${buildarch}, ${platform},
//     ${serial:uristring}, …) filled in as the machine's iPXE would, until a
//     script has a kernel line;
//  5. kernel, initrd: the files the script names, on the machine's own TCP
//     connection (receive buffer -rcvbuf: 256 KiB as iPXE, or 0 for Linux
//     autotuning), sizes checked against Content-Length and optionally the
//     SHA-256 against -kernel-sha256 / -initrd-sha256. Bodies are read in
//     steps of up to 256 KiB (32 KiB with -bulk-inline) and, over http and
//     unless -copy-bodies or a digest is asked for, dropped in the kernel
//     unread (recv MSG_TRUNC), so that the client's copy takes no CPU from
//     the server under test.
//
// Per machine it records the time to initrd complete, each step's duration
// and, for a machine that did not finish, the step it failed at and why.
// The summary: machines done, failures by step and reason, completion time
// (first start to last initrd), p50/p99/max per machine and per step, as a
// table or, with -json, one JSON object that also lists every machine.
//
// A failed request fails its step with reason no-ack (no usable answer
// after the last timeout) or bad-ack (an ACK without a boot file).
//
// All machines share one DHCP socket (UDP 68, SO_REUSEADDR, SO_BROADCAST,
// optionally SO_BINDTODEVICE) and one on UDP 4011 for the firmware's
// requests, whose replies are matched to machines by xid and chaddr, as
// dhcpload does; each TFTP transfer has its own ephemeral port and each
// machine its own HTTP connections. -src-ips gives machines their own
// source addresses (the TFTP server bounds transfers per client address,
// as it should: real machines each have one); a machine without one names
// the namespace's address as ciaddr. Run it in a network namespace next to
// the server under test, never on a real network. N, concurrency, the
// run's duration and each machine's are capped (see -help).
//
// dnsmasq 2.90 in proxy mode boots storm's machines with the configuration
// in bench/README.md (storm section), which TestAgainstDnsmasq uses.
package main
