// Package discovery records machines that PXE-boot without a live entry
// (the discovered-machine ledger, reported as bettercompute.agent.v1
// DiscoveredMachine), remembers what DHCP requests of machines with an
// entry said (Observations), and signs the appliance's
// DiscoveryAssertions.
//
// Only the DHCP proxy feeds the ledger; an HTTP request can only move
// last_seen of a machine DHCP put there (Touch). The Ledger is bounded (Max
// machines; new ones enter at a limited rate per MAC prefix and per
// source; when full, a one-shot machine goes before one seen repeatedly),
// forgets a machine Forget after its last sighting, and is kept across
// restarts by Run, which saves it periodically with one fsync per save
// rather than one per packet. The file format is described in
// ledgerfile.go; a damaged file is set aside, never fatal.
//
// Signatures follow the protocol reference's Signature,
// SignedDiscoveryAssertion and DiscoveryAssertion (section site.proto):
// ES256 (ECDSA P-256, SHA-256), a 64-byte r‖s sig, kid = unpadded base64url
// of SHA-256 over the SubjectPublicKeyInfo DER, over the message built by
// SigningMessage. testdata/sig-vectors.json holds vectors made outside this
// package. ParseJWKS and (*KeySet).MarshalJWKS read and write the site's
// public keys as a JWK Set; VerifyAssertionText checks the text a ramdisk
// script carries after bc.assertion=.
package discovery
