package appliance

import (
	"github.com/siteboot/siteboot/bmc"
	"github.com/siteboot/siteboot/dhcpproxy"
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/httpproxy"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/site"
	"github.com/siteboot/siteboot/tftpd"
)

// The parts the appliance wires together satisfy the interfaces their
// consumers declare, without adapters. These compile-time checks sit with
// the wiring (not in a test: they assert nothing at run time), so that no
// consumer imports a producer only to assert this; a part that stops
// satisfying its consumer fails the build here, naming both.
var (
	_ dhcpproxy.Entries   = (*site.State)(nil)
	_ dhcpproxy.Gate      = (*lease.Node)(nil)
	_ dhcpproxy.Discovery = (*discovery.Ledger)(nil)
	_ dhcpproxy.Observer  = (*discovery.Observations)(nil)
	_ dhcpproxy.BootFiles = (*images.Set)(nil)

	_ ipxe.Entries   = (*site.State)(nil)
	_ ipxe.Gate      = (*lease.Node)(nil)
	_ ipxe.Discovery = (*discovery.Ledger)(nil)
	_ ipxe.Observed  = (*discovery.Observations)(nil)
	_ ipxe.Signer    = (*discovery.Signer)(nil)
	_ ipxe.Secrets   = secretref.Resolver{}

	_ tftpd.Files = (*images.Set)(nil)

	_ bmc.Secrets       = secretref.Resolver{}
	_ httpproxy.Secrets = secretref.Resolver{}
	_ httpproxy.Targets = (*site.State)(nil)

	_ keySource = (*lease.Node)(nil)
)
