// Command storm is siteboot's boot-storm load generator: it plays N
// machines booting at once as PXE firmware and iPXE do, each with its own
// MAC, SMBIOS UUID (option 97) and architecture (option 93: BIOS 0 or
// x86-64 UEFI 7), their starts spread over a window of a few seconds.
//
// Each machine goes through the steps of a real network boot:
//
//  1. pxe-dhcp: a PXE DHCPDISCOVER (option 60 PXEClient:Arch:…, broadcast),
//     retransmitted as firmware does (4, 8, 16, 32 s), until a proxy offer
//     (yiaddr 0, option 60 PXEClient) names the first stage and next server;
//  2. first-stage: the first stage by TFTP (blksize 1468 and tsize, an edk2-
//     style tsize probe first, request and ACK retransmits on timeout, the
//     size checked against tsize) or, for UEFI HTTP boot (-uefi-http), by
//     HTTP from the URL the HTTPClient offer names;
//  3. ipxe-dhcp: iPXE's DISCOVER (option 77 "iPXE", same MAC and UUID) until
//     the offer names the script URL;
//  4. script: that script (/boot.ipxe), then what it chains (/ipxe?…) with
//     iPXE's variables (${mac}, ${uuid}, ${buildarch}, ${platform},
//     ${serial:uristring}, …) filled in as the machine's iPXE would, until a
//     script has a kernel line;
//  5. kernel, initrd: the files the script names, on the machine's own TCP
//     connection (receive buffer -rcvbuf: 256 KiB as iPXE, or 0 for Linux
//     autotuning), sizes checked against Content-Length and optionally the
//     SHA-256 against -kernel-sha256 / -initrd-sha256.
//
// Per machine it records the time to initrd complete, each step's duration
// and, for a machine that did not finish, the step it failed at and why.
// The summary: machines done, failures by step and reason, completion time
// (first start to last initrd), p50/p99/max per machine and per step, as a
// table or, with -json, one JSON object that also lists every machine.
//
// All machines share one DHCP socket (UDP 68, SO_REUSEADDR, SO_BROADCAST,
// optionally SO_BINDTODEVICE), whose replies are matched to machines by xid
// and chaddr, as dhcpload does; each TFTP transfer has its own ephemeral
// port and each machine its own HTTP connections. -src-ips gives machines
// their own source addresses (the TFTP server bounds transfers per client
// address, as it should: real machines each have one). Run it in a network
// namespace next to the server under test, never on a real network. N,
// concurrency, the run's duration and each machine's are capped (see -help).
package main
