// Package site owns the replicated site state of a siteboot appliance: the
// boot entries (bettercompute.site.v1.ProxyDhcpEntry and the node each
// belongs to), their validation and normalisation, and the deterministic
// state machine the raft log is applied to.
//
// Writes go through Store, which validates a request, encodes it as a
// siteboot.state.v1.SiteCommand and hands it to an Applier (the lease
// package's raft node). Reads (Lookup, List) come from the local State.
// The state machine never reads a clock: every time it needs comes in the
// command, stamped by the proposer, so all replicas apply the same result.
//
// The state machine does not trust the log: every command it applies and
// every snapshot it restores is checked with the API's own rules (those that
// need neither a clock nor local configuration; see state_check.go). A
// command that breaks them changes nothing; an invalid entry of a
// PutEntries or of a snapshot is skipped, logged and counted.
package site
