package appliance

import (
	"context"
	"time"

	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/internal/httpserver"
	"golang.org/x/sync/errgroup"
)

// janitorEvery is how often expired entries are purged from the state.
const janitorEvery = 30 * time.Second

// Run serves every part until ctx ends or one of them fails.
func (a *Appliance) Run(ctx context.Context) error {
	hs, err := httpserver.New(httpserver.Config{MaxConnections: a.cfg.HTTP.MaxConnections, MaxPerSource: a.cfg.HTTP.MaxPerSource,
		ProgressTimeout: time.Duration(a.cfg.HTTP.ProgressTimeout), Logger: a.log, Metrics: a.reg})
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.node.Run(ctx) })
	g.Go(func() error { return a.ledger.Run(ctx) })
	g.Go(func() error { return a.runCache(ctx) })
	ln := hs.Listener(a.httpLn)
	if a.cfg.Cache.FastPath {
		ln = a.cache.Listener(ln, imagecache.ListenerConfig{
			ReadHeaderTimeout: httpserver.DefaultReadHeaderTimeout, IdleTimeout: httpserver.DefaultIdleTimeout})
	}
	g.Go(func() error { return hs.Serve(ctx, ln, a.httpMux()) })
	if a.dhcp != nil {
		g.Go(func() error { return a.dhcp.Serve(ctx, a.dhcpConn...) })
	}
	if a.tftp != nil {
		g.Go(func() error { return a.tftp.Serve(ctx, a.tftpConn) })
	}
	g.Go(func() error { a.store.RunJanitor(ctx, janitorEvery); return nil })
	g.Go(func() error { a.announceReady(ctx); return nil })
	err = g.Wait()
	a.log.Info("siteboot stopped")
	return err
}

// Ready is closed once the replicated state is restored (lease.Node.Ready:
// standalone, the boot lease was held for the first time; cluster, the log
// is applied and a leader is known; external, the log is applied). Before
// that every operation but Status and Lease fails with a *StartingError.
func (a *Appliance) Ready() <-chan struct{} { return a.node.Ready() }

func (a *Appliance) isReady() bool {
	select {
	case <-a.node.Ready():
		return true
	default:
		return false
	}
}

// started fails with a *StartingError until the state is restored, so no
// read ever answers from a state raft has not replayed yet.
func (a *Appliance) started() error {
	if a.isReady() {
		return nil
	}
	return &StartingError{Raft: a.node.RaftState()}
}

// runCache starts the cache once the replicated state has caught up, then
// keeps it in step with the state (see sync.go): on a restart raft replays
// its log only after the node leads again, and a cache told the wanted set
// before that would release (and delete the partial pulls of) every image,
// and evict with no pins known.
func (a *Appliance) runCache(ctx context.Context) error {
	select {
	case <-a.node.Ready():
	case <-ctx.Done():
		return nil
	}
	if err := a.syncOnce(); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.cache.Run(ctx) })
	g.Go(func() error { a.follow(ctx); return nil })
	return g.Wait()
}

func (a *Appliance) announceReady(ctx context.Context) {
	select {
	case <-a.node.Ready():
	case <-ctx.Done():
		return
	}
	epoch, _ := a.node.Gate()
	a.log.Info("siteboot ready", "site", a.cfg.SiteID, "node", a.cfg.NodeID, "version", a.version, "epoch", epoch,
		"admin_socket", a.cfg.Admin.Socket, "http", a.httpLn.Addr().String(), "data_dir", a.cfg.DataDir,
		"boot_files", len(a.boot.Files()), "kid", a.signer.KID())
}
