package dhcpproxy

import (
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
)

// The collaborators the lead wires in satisfy the consumer interfaces
// without adapters.
var (
	_ Entries   = (*site.State)(nil)
	_ Gate      = (*lease.Node)(nil)
	_ Discovery = (*discovery.Ledger)(nil)
)
