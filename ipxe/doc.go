// Package ipxe renders the iPXE scripts this appliance serves and owns
// their HTTP handlers: GET /boot.ipxe (the bootstrap every iPXE client is
// pointed at) and GET /ipxe (one machine's script, the protocol
// reference's IpxeScriptRequest → IpxeScript, section site.proto).
//
// The flow is DESIGN.md "Boot flow" steps 3-4 with PXE-NOTES rules 9, 10, 12
// and 13: the bootstrap retries dhcp and chains straight to an absolute
// /ipxe URL (no chainload loop); /ipxe answers a ramdisk script (kernel with
// initrd=<name> and bc.* parameters, the entry's discovery token and a
// freshly signed SignedDiscoveryAssertion), a sanboot script for entries
// with sanboot_sha256, a chain to the entry's ipxe_script_url, or, for a
// MAC without a live entry, a script that says so (and a discovery
// sighting). While the boot lease gate is closed every request gets 503:
// nothing is signed and no secret is resolved.
//
// Everything placed in a script is either fixed text, a value normalised to
// a fixed alphabet (MAC, UUID), a URL checked against a safe character set,
// or percent-encoded (bc.* values), so a client cannot add a line, a token,
// a comment or a ${setting} expansion to the script it gets.
package ipxe
