package ipxe

import "github.com/siteboot/siteboot/lease"

// lease.Node is the Gate the appliance wires in (kept out of the package
// itself so that ipxe does not link raft).
var _ Gate = (*lease.Node)(nil)
