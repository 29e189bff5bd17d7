// Package e2e holds the end-to-end tests of the whole appliance: the real
// siteboot binary, built once per run, serving on a private LAN made of
// network namespaces (internal/netlab), driven only through its own CLI
// over the admin socket, and booted against by real firmware in QEMU
// (SeaBIOS with the iPXE NIC ROM, and OVMF with edk2's own PXE client).
// The site's ordinary DHCP server is dnsmasq on another host; the ramdisk
// kernel, initrd and cache origin are HTTP servers on a third host that
// record every request, so success is observed on the server side.
//
// What the tests prove (issue "2/5 The PXE boot path" item 7 and issue
// "3/5 The verified image cache" item 7):
//
//   - a BIOS machine with a live entry goes SeaBIOS → iPXE ROM → siteboot's
//     proxy offer (PXE 2.1 proxyDHCP, RFC 2131/2132, RFC 4578) →
//     /boot.ipxe → /ipxe → the ramdisk kernel and initrd its script names;
//   - a UEFI machine (edk2 PXE, arch 7) gets its first stage over siteboot's
//     TFTP (RFC 1350, 2347-2349), then iPXE follows the same path;
//   - a machine without an entry is never offered anything nor served a
//     script, still gets its address from the site's DHCP server, and is
//     listed by `siteboot discovered ls` with its MAC, arch and option 97;
//   - a relayed DISCOVER (giaddr set, hops 1) is answered to giaddr:67
//     (RFC 2131 §4.1) with yiaddr 0 and siteboot's own address as siaddr
//     and option 54; an unknown relayed MAC gets nothing and is recorded
//     with the relay's address;
//   - a sanboot entry of a cached ISO (Debian's ipxe.iso, pulled and
//     verified by the image cache) is read by iPXE with HEAD and 206 range
//     GETs from /cache/<sha256>, and the ISO's iPXE then starts and DHCPs.
//
// The relay tests put a BMC on the LAN: OpenIPMI's ipmi_sim on a lab host
// (internal/ipmisim), whose chassis program is a SeaBIOS VM that power on
// starts and power off stops. `siteboot bmc --driver ipmi … power.setPower
// on` boots it, and it PXE-boots from siteboot (its script served while it
// has an entry, only listed by `discovered ls` once the entry is gone).
// TestRelayLogsHoldNoSecret runs every BMC operation (ipmi_sim, and the
// test Redfish service over TLS) and httpProxy request (secret and plain
// headers to an https proxy target) through the CLI, failures included,
// and finds none of the secrets, nor their base64 forms, in siteboot's
// debug log, the CLI's output or the metrics page.
//
// The lease tests run three appliances as one raft cluster (lease.mode
// cluster, raft certificates made with `siteboot cluster init-ca` and
// `issue-cert`) and a probe host that sends a PXE DISCOVER and asks every
// appliance for /ipxe every 100 ms, verifying each assertion against the
// answering appliance's /v1/keys and node key. TestLeaseFaults injects 20
// random faults (kill -9, SIGSTOP, partitions both ways and one way, a
// follower restarted during a partition, a frozen data disk) and a checker
// asserts: never two answerers at once, epochs never decrease or repeat
// across nodes, nothing answered or signed by a fenced node, service back
// after each fault. SITEBOOT_FAULT_SEED replays a run (the seed is
// logged), SITEBOOT_FAULT_COUNT changes the count. TestBenchFailover (only
// with SITEBOOT_BENCH_FAILOVER=1) times failovers at lease.ttl 5s.
//
// TestContainerBoot runs the image `make container` builds (loaded back
// from its docker archive) under podman in a lab host's network namespace
// with only CAP_NET_BIND_SERVICE and CAP_NET_RAW: it becomes healthy by its
// HEALTHCHECK, takes an entry from the host's CLI through the admin socket
// on its data volume, and a SeaBIOS VM PXE-boots from it to its script.
//
// TestApplianceVM boots the VM image `make appliance` builds under SeaBIOS
// with a config drive and a blank data disk: it answers the admin API over
// mutual TLS only to the configured CA's client certificates, a SeaBIOS VM
// PXE-boots from it, and on its serial console siteboot is the packaged
// service running as its own user on the data disk; a fresh image keeps the
// data, and the .deb upgrades and purges in place.
//
// The tests need root, QEMU, OVMF, Debian's ipxe package and dnsmasq; they
// skip without them (and fail instead when SITEBOOT_E2E=require), and they
// skip under -short. VMs run one at a time.
package e2e
