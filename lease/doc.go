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
// assertions. In standalone mode a single-voter raft is bootstrapped on first
// start, and every time the node takes leadership it commits a new epoch
// (after a Barrier, so the epoch is above every one in the log); the gate
// opens once that epoch is applied and closes the moment leadership is lost.
package lease
