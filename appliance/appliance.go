package appliance

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
	"github.com/siteboot/siteboot/bmc"
	"github.com/siteboot/siteboot/dhcpproxy"
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/httpproxy"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/site"
	"github.com/siteboot/siteboot/tftpd"
)

// Appliance is one running siteboot: every part and the sockets they serve
// on. Open builds and binds everything; Run serves until its context ends;
// the methods in entries.go, images.go, status.go, scripts.go and relays.go
// are the operations the admin API offers.
type Appliance struct {
	cfg       Config
	log       *slog.Logger
	version   string
	startedAt time.Time
	now       func() time.Time
	reg       *prometheus.Registry

	state  *site.State
	node   *lease.Node
	store  *site.Store
	signer *discovery.Signer
	ledger *discovery.Ledger
	seen   *discovery.Observations
	boot   *images.Set
	script *ipxe.Server
	dhcp   *dhcpproxy.Server
	tftp   *tftpd.Server
	cache  *imagecache.Cache
	pins   *pins
	synced *syncTracker
	bmc    *bmc.Relay
	proxy  *httpproxy.Proxy

	closers  []func() error
	httpLn   net.Listener
	dhcpConn []*dhcpproxy.Conn
	tftpConn net.PacketConn
}

// Open builds every part from cfg (which must have passed Finish) and binds
// the network services. version is reported by status and metrics. On error
// everything opened so far is closed again.
func Open(ctx context.Context, cfg Config, log *slog.Logger, version string) (*Appliance, error) {
	a := &Appliance{cfg: cfg, log: log, version: version, startedAt: time.Now(), now: time.Now, synced: newSyncTracker()}
	steps := []func(context.Context) error{
		a.buildCore, a.buildDiscovery, a.buildBoot, a.buildCache, a.buildStore, a.buildRelays, a.bindHTTP, a.bindDHCP, a.bindTFTP,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// Close releases everything Open acquired, in reverse order. Run must have
// returned.
func (a *Appliance) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("shutdown", "err", err)
		}
	}
	a.closers = nil
}

func (a *Appliance) onClose(f func() error) { a.closers = append(a.closers, f) }

// Registry is the metrics registry every part registers on; /metrics serves
// it. Transport adapters (the admin API) register their own metrics here.
func (a *Appliance) Registry() *prometheus.Registry { return a.reg }

// Config returns the configuration the appliance runs with.
func (a *Appliance) Config() Config { return a.cfg }

// buildCore: data dir, metrics registry, raft and the site state.
func (a *Appliance) buildCore(context.Context) error {
	if err := prepareDataDir(a.cfg.DataDir, LookupGroup(a.cfg.Admin.Group)); err != nil {
		return err
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "siteboot_build_info", Help: "Always 1; labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": a.version, "site_id": a.cfg.SiteID, "node_id": a.cfg.NodeID}})
	info.Set(1)
	a.reg.MustRegister(info)

	// The node key first: the lease publishes its public half.
	signer, err := discovery.LoadOrCreateKey(filepath.Join(a.cfg.DataDir, "node.key"))
	if err != nil {
		return err
	}
	a.signer = signer
	a.state = site.NewState(site.WithLogger(a.log))
	if a.cfg.Raft.Listen != "" {
		a.log.Warn("config: raft.listen is deprecated; use lease.raft.bind", "raft.listen", a.cfg.Raft.Listen)
	}
	lc, err := a.leaseConfig()
	if err != nil {
		return err
	}
	node, err := lease.Open(lc)
	if err != nil {
		return err
	}
	a.node = node
	a.onClose(node.Close)
	return site.RegisterMetrics(a.reg, a.state, a.now)
}

// buildDiscovery: the discovered-machine ledger (the node key is loaded
// by buildCore).
func (a *Appliance) buildDiscovery(context.Context) error {
	ledger, err := discovery.OpenLedger(discovery.LedgerConfig{
		Path: filepath.Join(a.cfg.DataDir, "discovered.pb"), Now: a.now, Logger: a.log, Metrics: a.reg,
	})
	if err != nil {
		return err
	}
	a.ledger = ledger
	a.seen = discovery.NewObservations(discovery.ObservationsConfig{})
	return nil
}

// buildBoot: first-stage boot files and the iPXE script server.
func (a *Appliance) buildBoot(context.Context) error {
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
		Now:     a.now, Logger: a.log, Metrics: a.reg,
		Entries: a.state, Gate: a.node, Signer: a.signer, Discovery: a.ledger, Observed: a.seen,
		Secrets: secretref.Resolver{Policy: a.cfg.SecretPolicy(), LookupEnv: os.LookupEnv},
	})
	return err
}

// buildStore: the validated write side of the site state.
func (a *Appliance) buildStore(context.Context) error {
	a.store = site.NewStore(site.StoreConfig{
		State: a.state, Applier: a.node, Now: a.now, Logger: a.log, Images: a.cache,
		Limits: site.Limits{DefaultTTL: time.Duration(a.cfg.Entries.DefaultTTL), MaxTTL: time.Duration(a.cfg.Entries.MaxTTL),
			SecretRef: a.cfg.SecretPolicy().Check},
	})
	return nil
}

func (a *Appliance) bindHTTP(context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	a.httpLn = ln
	a.onClose(func() error { ln.Close(); return nil })
	return nil
}

func (a *Appliance) bindDHCP(ctx context.Context) error {
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
	relays, _ := ParseRelays(a.cfg.DHCP.Relays) // checked by Config.check
	srv, err := dhcpproxy.New(dhcpproxy.Config{
		Interfaces: a.cfg.DHCP.Interfaces, AdvertiseIP: adv, HTTPAdvertise: a.cfg.HTTP.Advertise, HTTPPort: port, Relays: relays,
		Entries: a.state, Gate: a.node, Discovery: a.ledger, Observed: a.seen, BootFiles: a.boot,
		Logger: a.log, Registerer: a.reg, Now: a.now,
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
		a.log.Info("dhcp listening", "iface", c.Iface, "ip", c.IP, "port", c.Port, "rcvbuf", c.RcvBuf, "sndbuf", c.SndBuf)
	}
	return nil
}

func (a *Appliance) bindTFTP(context.Context) error {
	if a.cfg.TFTP.Listen == "" || a.cfg.TFTP.Enabled == "false" {
		a.log.Info("tftp: disabled (tftp.enabled: false or tftp.listen empty)")
		return nil
	}
	tc := a.cfg.TFTPConfig(a.boot)
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
	a.onClose(func() error { pc.Close(); return nil })
	a.log.Info("tftp listening", "addr", pc.LocalAddr().String(), "files", len(a.boot.Files()))
	return nil
}

// optional decides what a service that cannot bind does: with enabled
// "true" the appliance does not start; with "auto" it starts without the
// service and says so, loudly, once.
func (a *Appliance) optional(service, enabled string, err error) error {
	if enabled == "true" || !(errors.Is(err, os.ErrPermission) || errors.Is(err, dhcpproxy.ErrNoInterfaces)) {
		return err
	}
	a.log.Warn(service+": NOT RUNNING: machines will not be answered by it", "err", err, "hint", service+".enabled: true makes this fatal")
	return nil
}

// prepareDataDir creates the data dir with mode 0750, group gid if ≥ 0, so
// admin-group members can reach the socket inside it and nobody else can.
func prepareDataDir(dir string, gid int) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("data_dir: chown to gid %d: %w", gid, err)
		}
	}
	return nil
}
