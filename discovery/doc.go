// Package discovery records machines that boot without a live entry (the
// discovered-machine ledger, reported as bettercompute.agent.v1
// DiscoveredMachine) and signs the appliance's DiscoveryAssertions.
package discovery
