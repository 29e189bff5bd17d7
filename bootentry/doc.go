// Package bootentry is the boot path's view of a boot entry and the rules
// every entry must meet so that the boot path can serve it.
//
// An Entry is what the proxyDHCP server (package dhcpproxy) and the iPXE
// script renderer (package ipxe) need of a bettercompute.site.v1
// ProxyDhcpEntry and the node it belongs to, in plain Go types. The site
// state builds one Entry when it stores an entry, never per request: the
// DHCP path reads it on every packet, so a lookup copies a struct and
// allocates nothing. Neither reader sees the replicated log's messages.
//
// The rules (NormalizeMAC, NormalizeUUID, CheckProductUUID, CheckBootFile,
// CheckScriptURL, CheckSanbootSHA256) are the only definition of a valid
// entry field. The admin API validates requests with them (through
// site.ValidateEntries) and the renderers re-check what they place into a
// reply with the same functions, so an entry the API accepted always
// renders. Errors name the value, not the field: callers add the field.
package bootentry
