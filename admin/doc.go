// Package admin serves the appliance's admin API, the gRPC service
// siteboot.v1.SiteBoot, over a Unix socket whose peers are checked with
// SO_PEERCRED (root, or a member of the admin group) and optionally over TCP
// with mutual TLS. It is a thin adapter: requests go to the site Store, and
// every error is mapped to a gRPC status in one place (Status).
package admin
