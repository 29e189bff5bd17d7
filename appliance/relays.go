package appliance

import (
	"context"
	"os"

	"github.com/siteboot/siteboot/bmc"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/httpproxy"
	"github.com/siteboot/siteboot/secretref"
)

// buildRelays: the BMC relay and httpProxy. They bind nothing; each call
// dials its target afresh.
func (a *Appliance) buildRelays(context.Context) error {
	secrets := secretref.Resolver{Policy: a.cfg.SecretPolicy(), LookupEnv: os.LookupEnv}
	bc := a.cfg.BMCConfig()
	bc.Secrets, bc.Logger, bc.Registerer = secrets, a.log, a.reg
	relay, err := bmc.New(bc)
	if err != nil {
		return err
	}
	pc := a.cfg.HTTPProxyConfig()
	pc.Targets, pc.Secrets, pc.Logger, pc.Registerer = a.state, secrets, a.log, a.reg
	proxy, err := httpproxy.New(pc)
	if err != nil {
		return err
	}
	a.bmc, a.proxy = relay, proxy
	return nil
}

// BmcOperation runs one BMC operation from this appliance, to an address
// in bmc.networks only. Every failure of the operation itself, a refused
// target included, is a result with OK false and a relayerr code; the
// error is for a call the appliance cannot take yet (*StartingError).
//
// It is not gated by the boot lease (it is not a boot answer) and not
// forwarded to the leader: the appliance that gets the call acts.
func (a *Appliance) BmcOperation(ctx context.Context, req *sitev1.BmcOperationRequest) (*sitev1.BmcOperationResult, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	return a.bmc.Do(ctx, req), nil
}

// HttpProxy makes one site.httpProxy request from this appliance, to an
// address the site spec's proxy_targets list for the target node and no
// denied one (see Config.HTTPProxyConfig). A refused or failed request is
// a *relayerr.Error; before the state is restored (the spec with it) a
// *StartingError. Like BmcOperation it is neither lease-gated nor
// forwarded.
func (a *Appliance) HttpProxy(ctx context.Context, req *sitev1.HttpProxyRequest) (*sitev1.HttpProxyResponse, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	return a.proxy.Do(ctx, req)
}
