// Package discovery records machines that boot without a live entry (the
// discovered-machine ledger, reported as bettercompute.agent.v1
// DiscoveredMachine) and signs the appliance's DiscoveryAssertions.
//
// The Ledger is bounded (Max machines, the one seen longest ago evicted
// first), forgets a machine Forget after its last sighting, and is kept
// across restarts by Run, which saves it periodically with one fsync per
// save rather than one per packet (PXE-NOTES rule 14). The file format is
// described in ledgerfile.go; a damaged file is set aside, never fatal.
//
// Signatures follow DESIGN.md "Signatures" and the protocol reference's
// Signature, SignedDiscoveryAssertion and DiscoveryAssertion (section
// site.proto): ES256 (ECDSA P-256, SHA-256), a 64-byte r‖s sig, kid =
// unpadded base64url of SHA-256 over the SubjectPublicKeyInfo DER, over the
// message built by SigningMessage. testdata/sig-vectors.json holds vectors
// made outside this package.
package discovery
