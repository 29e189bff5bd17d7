// Package ipxe renders the iPXE scripts this appliance serves and owns
// their HTTP handlers: GET /boot.ipxe (the bootstrap every iPXE client is
// pointed at) and GET /ipxe (one machine's script, the protocol
// reference's IpxeScriptRequest → IpxeScript, section site.proto).
//
// The bootstrap retries dhcp and chains straight to an absolute /ipxe URL
// (no chainload loop); /ipxe answers a ramdisk script (kernel with
// initrd=<name> and bc.* parameters, the entry's discovery token and a
// freshly signed SignedDiscoveryAssertion), a sanboot script for entries
// with sanboot_sha256, a chain to the entry's ipxe_script_url, or, for a
// MAC without a live entry (or one whose entry pins another product_uuid),
// a script that says so. While the boot lease gate is closed every request
// gets 503: nothing is signed and no secret is resolved. Script requests
// never add a machine to the discovery ledger; an assertion says only what
// this appliance observed (see the README).
//
// Everything placed in a script is either fixed text, a value normalised to
// a fixed alphabet (MAC, UUID), a URL checked against a safe character set
// (bootentry.CheckScriptURL), or percent-encoded (bc.* values), so a client
// cannot add a line, a token, a comment or a ${setting} expansion to the
// script it gets. Script URLs name this appliance by Config.BaseURL or by
// the address the request arrived at, never by the Host header.
package ipxe
