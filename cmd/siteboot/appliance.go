package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/siteboot/siteboot/admin"
	"github.com/siteboot/siteboot/dhcpproxy"
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/site"
	"github.com/siteboot/siteboot/tftpd"
	"golang.org/x/sync/errgroup"
)

// appliance holds every part of a running siteboot and the sockets they
// serve on. build opens and binds everything; run serves until ctx ends.
type appliance struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	state  *site.State
	node   *lease.Node
	store  *site.Store
	signer *discovery.Signer
	ledger *discovery.Ledger
	boot   *images.Set
	script *ipxe.Server
	api    *admin.Server
	dhcp   *dhcpproxy.Server
	tftp   *tftpd.Server
	cache  *imagecache.Cache
	pins   *pins

	closers  []func() error
	sock     net.Listener
	httpLn   net.Listener
	dhcpConn []*dhcpproxy.Conn
	tftpConn net.PacketConn
}

// serve runs the appliance until ctx ends.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	a := &appliance{cfg: cfg, log: log}
	defer a.close()
	if err := a.build(ctx); err != nil {
		return err
	}
	return a.run(ctx)
}

func (a *appliance) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("shutdown", "err", err)
		}
	}
}

func (a *appliance) onClose(f func() error) { a.closers = append(a.closers, f) }

func (a *appliance) build(ctx context.Context) error {
	steps := []func(context.Context) error{
		a.buildCore, a.buildDiscovery, a.buildBoot, a.buildCache, a.buildAPI, a.bindAdmin, a.bindHTTP, a.bindDHCP, a.bindTFTP,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// buildCore: data dir, metrics registry, raft and the site state.
func (a *appliance) buildCore(context.Context) error {
	if err := prepareDataDir(a.cfg.DataDir, lookupGroup(a.cfg.Admin.Group)); err != nil {
		return err
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "siteboot_build_info", Help: "Always 1; labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": version, "site_id": a.cfg.SiteID, "node_id": a.cfg.NodeID}})
	info.Set(1)
	a.reg.MustRegister(info)

	a.state = site.NewState()
	node, err := lease.Open(lease.Config{
		Dir: filepath.Join(a.cfg.DataDir, "raft"), ID: a.cfg.NodeID, Bind: a.cfg.Raft.Listen,
		TTL: time.Duration(a.cfg.Lease.TTL), StateMachine: a.state, Logger: a.log,
	})
	if err != nil {
		return err
	}
	a.node = node
	a.onClose(node.Close)
	if err := node.RegisterMetrics(a.reg); err != nil {
		return err
	}
	return site.RegisterMetrics(a.reg, a.state, time.Now)
}

// buildDiscovery: the node key and the discovered-machine ledger.
func (a *appliance) buildDiscovery(context.Context) error {
	signer, err := discovery.LoadOrCreateKey(filepath.Join(a.cfg.DataDir, "node.key"))
	if err != nil {
		return err
	}
	a.signer = signer
	ledger, err := discovery.OpenLedger(discovery.LedgerConfig{
		Path: filepath.Join(a.cfg.DataDir, "discovered.pb"), Now: time.Now, Logger: a.log, Metrics: a.reg,
	})
	if err != nil {
		return err
	}
	a.ledger = ledger
	return nil
}

// buildBoot: first-stage boot files and the iPXE script server.
func (a *appliance) buildBoot(context.Context) error {
	var linkRoots []string
	if dir := filepath.Clean(a.cfg.BootFiles.Dir); a.cfg.BootFiles.Dir == "" || slices.Contains(images.DefaultDirs(), dir) {
		// Debian's ipxe package links /usr/lib/ipxe/ipxe.efi to /boot.
		linkRoots = []string{"/boot"}
	}
	set, err := images.Load(images.Config{Dir: a.cfg.BootFiles.Dir, PreferSNP: a.cfg.BootFiles.PreferSNP, LinkRoots: linkRoots, Logger: a.log})
	if err != nil {
		return err
	}
	a.boot = set
	a.onClose(set.Close)
	a.script, err = ipxe.New(ipxe.Config{
		SiteID: a.cfg.SiteID, NodeID: a.cfg.NodeID, BaseURL: a.cfg.HTTP.Advertise,
		Ramdisk: ipxe.Ramdisk{Kernel: a.cfg.Ramdisk.Kernel, Initrd: a.cfg.Ramdisk.Initrd, Cmdline: a.cfg.Ramdisk.Cmdline},
		Now:     time.Now, Logger: a.log, Metrics: a.reg,
		Entries: a.state, Gate: a.node, Signer: a.signer, Discovery: a.ledger,
		Secrets: secretref.Resolver{Policy: a.cfg.secretPolicy(), LookupEnv: os.LookupEnv},
	})
	return err
}

func (a *appliance) buildAPI(context.Context) error {
	a.store = site.NewStore(site.StoreConfig{
		State: a.state, Applier: a.node, Now: time.Now, Logger: a.log, Images: a.cache,
		Limits: site.Limits{DefaultTTL: time.Duration(a.cfg.Entries.DefaultTTL), MaxTTL: time.Duration(a.cfg.Entries.MaxTTL)},
	})
	var err error
	a.api, err = admin.New(admin.Config{
		Store: a.store, Lease: a.node, SiteID: a.cfg.SiteID, NodeID: a.cfg.NodeID, Version: version,
		StartedAt: time.Now(), Now: time.Now, Logger: a.log, Metrics: a.reg,
		AdminGID: lookupGroup(a.cfg.Admin.Group), AdminGroup: a.cfg.Admin.Group,
		Discovered: a.ledger, Scripts: scriptPreview{a}, BootFiles: a.boot, Keys: a.signer, Listeners: a.listeners,
		Cache: a.cache, SyncImages: a.syncImages,
	})
	return err
}

func (a *appliance) bindAdmin(context.Context) error {
	sock, err := admin.ListenUnix(a.cfg.Admin.Socket, lookupGroup(a.cfg.Admin.Group))
	if err != nil {
		return err
	}
	a.sock = sock
	return nil
}

func (a *appliance) bindHTTP(context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	a.httpLn = ln
	a.onClose(func() error { ln.Close(); return nil })
	return nil
}

func (a *appliance) bindDHCP(ctx context.Context) error {
	if a.cfg.DHCP.Enabled == "false" {
		a.log.Info("dhcp: disabled (dhcp.enabled: false)")
		return nil
	}
	_, portStr, _ := net.SplitHostPort(a.httpLn.Addr().String())
	port, _ := strconv.Atoi(portStr)
	var adv net.IP
	if a.cfg.DHCP.AdvertiseIP != "" {
		adv = net.ParseIP(a.cfg.DHCP.AdvertiseIP).To4()
	}
	srv, err := dhcpproxy.New(dhcpproxy.Config{
		Interfaces: a.cfg.DHCP.Interfaces, AdvertiseIP: adv, HTTPAdvertise: a.cfg.HTTP.Advertise, HTTPPort: port,
		Entries: a.state, Gate: a.node, Discovery: a.ledger, BootFiles: a.boot,
		Logger: a.log, Registerer: a.reg, Now: time.Now,
	})
	if err != nil {
		return err
	}
	conns, err := srv.Listen(ctx)
	if err != nil {
		return a.optional("dhcp", a.cfg.DHCP.Enabled, fmt.Errorf("%w (run as root or with CAP_NET_BIND_SERVICE and CAP_NET_RAW, or set dhcp.enabled: false)", err))
	}
	a.dhcp, a.dhcpConn = srv, conns
	for _, c := range conns {
		a.log.Info("dhcp listening", "iface", c.Iface, "ip", c.IP, "port", c.Port)
	}
	return nil
}

func (a *appliance) bindTFTP(context.Context) error {
	if a.cfg.TFTP.Listen == "" || a.cfg.TFTP.Enabled == "false" {
		a.log.Info("tftp: disabled (tftp.enabled: false or tftp.listen empty)")
		return nil
	}
	tc := a.cfg.tftpConfig(a.boot)
	tc.Logger, tc.Metrics = a.log, a.reg
	srv, err := tftpd.New(tc)
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp4", a.cfg.TFTP.Listen)
	if err != nil {
		return a.optional("tftp", a.cfg.TFTP.Enabled, fmt.Errorf("tftp.listen %s: %w (run as root, or set tftp.enabled: false)", a.cfg.TFTP.Listen, err))
	}
	a.tftp, a.tftpConn = srv, pc
	a.log.Info("tftp listening", "addr", pc.LocalAddr().String(), "files", len(a.boot.Files()))
	return nil
}

// optional decides what a service that cannot bind does: with enabled
// "true" the appliance does not start; with "auto" it starts without the
// service and says so, loudly, once.
func (a *appliance) optional(service, enabled string, err error) error {
	if enabled == "true" || !(errors.Is(err, os.ErrPermission) || errors.Is(err, dhcpproxy.ErrNoInterfaces)) {
		return err
	}
	a.log.Warn(service+": NOT RUNNING: machines will not be answered by it", "err", err, "hint", service+".enabled: true makes this fatal")
	return nil
}

// run serves every part until ctx ends or one fails.
func (a *appliance) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.node.Run(ctx) })
	g.Go(func() error { return a.ledger.Run(ctx) })
	g.Go(func() error { return a.runCache(ctx) })
	g.Go(func() error { return a.api.ServeUnix(ctx, a.sock) })
	if a.cfg.Admin.TCPListen != "" {
		if err := serveAdminTLS(ctx, g, a.cfg, a.api); err != nil {
			return err
		}
	}
	ln := a.httpLn
	if a.cfg.Cache.FastPath {
		ln = a.cache.Listener(ln, imagecache.ListenerConfig{ReadHeaderTimeout: httpReadHeaderTimeout, IdleTimeout: httpIdleTimeout})
	}
	g.Go(func() error { return serveHTTP(ctx, ln, a.httpMux(), a.log) })
	if a.dhcp != nil {
		g.Go(func() error { return a.dhcp.Serve(ctx, a.dhcpConn...) })
	}
	if a.tftp != nil {
		g.Go(func() error { return a.tftp.Serve(ctx, a.tftpConn) })
	}
	g.Go(func() error { a.store.RunJanitor(ctx, 30*time.Second); return nil })
	g.Go(func() error { a.react(ctx); return nil })
	g.Go(func() error { a.announceReady(ctx); return nil })
	err := g.Wait()
	a.log.Info("siteboot stopped")
	return err
}

// react keeps local parts in step with the replicated state: the cache
// learns the wanted images and pins, and a MAC that now has a live entry is
// no longer a discovered machine.
func (a *appliance) react(ctx context.Context) {
	select {
	case <-a.node.Ready():
	case <-ctx.Done():
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.state.Changed():
		}
		if err := a.syncImages(); err != nil {
			a.log.Error("image cache: wanted images refused", "err", err)
		}
		now := time.Now()
		for _, m := range a.ledger.List() {
			if _, ok := a.state.Lookup(m.GetMac(), now); ok {
				a.ledger.Forget(m.GetMac())
			}
		}
	}
}

func (a *appliance) announceReady(ctx context.Context) {
	select {
	case <-a.node.Ready():
	case <-ctx.Done():
		return
	}
	a.api.SetServing(true)
	epoch, _ := a.node.Gate()
	a.log.Info("siteboot ready", "site", a.cfg.SiteID, "node", a.cfg.NodeID, "version", version, "epoch", epoch,
		"admin_socket", a.cfg.Admin.Socket, "http", a.httpLn.Addr().String(), "data_dir", a.cfg.DataDir,
		"boot_files", len(a.boot.Files()), "kid", a.signer.KID())
}
