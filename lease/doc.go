// Package lease owns the replicated log and the boot lease of a siteboot
// appliance.
//
// A Node runs hashicorp/raft with a bolt log and stable store
// (raft-boltdb) and file snapshots in the data dir. The raft log carries
// siteboot.state.v1.LogEntry envelopes: lease epochs, which this package
// applies itself, and site commands, which it hands to the StateMachine it
// was given (the site package's State).
//
// The boot lease (bettercompute.site.v1.BootLeaseState) says whether this
// appliance may answer proxyDHCP, serve iPXE scripts and sign discovery
// assertions. Gate is open while this node holds an epoch and the monotonic
// clock is before the end of its window, which a holder moves to
// (time before the check + ttl) each time raft confirms its leadership,
// every ttl/3; so a holder that is paused, starved or cut off closes its
// gate by the clock alone. In standalone mode a single-voter raft is
// bootstrapped on first start and every leadership commits a new epoch
// (after a Barrier, so it is above every one in the log). In cluster mode
// 3 or 5 voters bootstrap one configuration; the leader commits an epoch
// and waits ttl + margin from its win before opening, by when any former
// holder's window has ended. In external mode a control plane pushes the
// lease (UpdateLease); the highest pushed epoch is committed to the log so
// a lower one is refused even after a restart.
//
// Whoever can speak raft to a node can write the site state and take the
// lease, so the raft port (Config.Bind) speaks mutual TLS 1.3: a peer is
// accepted, and dialed, only with a certificate chained to the site CA
// (Config.TLS), and a server's certificate must also name the address
// dialed. Peers are not tied to a raft server id: the CA is the trust
// boundary (every certificate it issues is an appliance's), hashicorp/raft's
// stream layer sees addresses and not ids, and a certified appliance is
// already a voter that can write anything. A refused connection (not TLS,
// no certificate, another CA, timed out, over the connection bounds) is
// closed before raft reads a byte, counted in
// siteboot_raft_peers_refused_total and logged at most once per reason per
// 10 s. Plain TCP is accepted on a loopback address only, for tests.
//
// Lease epochs in the log are checked as they are applied: an epoch is one
// more than the current one and names a holder; anything else changes
// nothing. Site commands are checked by the StateMachine.
//
// Writes work on every member: a follower forwards them to the leader over
// the raft port (forward.go), waits until it applied the leader's index and
// answers with its own state machine's result. Membership (Members,
// AddVoter, RemoveServer) and the members' published node keys (Keys)
// travel the same way.
package lease
