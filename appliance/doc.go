// Package appliance is siteboot's core, with no transport. It builds the
// parts of one appliance from a Config — raft and the replicated site state
// (lease, site), the boot path (dhcpproxy, tftpd, images, ipxe), the image
// cache (imagecache) and discovery — binds their sockets (Open), runs them
// (Run), and owns every operation the admin API and the CLI offer, as a
// method with domain types and domain errors: entries, the site spec,
// images and pulls, status, discovered machines, scripts.
//
// Transports are adapters over it: package admin turns each gRPC call into
// one method call and maps the error to a code in one table; the HTTP
// surface of the boot path is served by Run itself.
//
// Two invariants are kept here. Operations answer only from a restored
// state: until the lease node is ready (raft has replayed its log; in
// standalone mode the lease was held, in cluster mode a leader is known),
// every method but Status and Lease fails with a *StartingError. And one path (follow, in
// sync.go) keeps the local parts — the cache's wanted set and pins, the
// discovered ledger — in step with the replicated state; a write returns
// once that path has synced the state version it produced.
package appliance
