package appliance

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/siteboot/siteboot/bmc"
	"github.com/siteboot/siteboot/httpproxy"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/internal/httpserver"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/tftpd"
	"go.yaml.in/yaml/v3"
)

// Config is the appliance configuration: a YAML file, then SITEBOOT_*
// environment variables, then flags, each overriding the one before. The
// yaml key path names the environment variable: admin.socket is
// SITEBOOT_ADMIN_SOCKET. The doc tag is the reference printed by --help.
type Config struct {
	SiteID  string `yaml:"site_id" doc:"this site's id, reported by status and put into scripts"`
	NodeID  string `yaml:"node_id" doc:"this appliance's node id (default: the hostname)"`
	DataDir string `yaml:"data_dir" doc:"state directory (default: $STATE_DIRECTORY, which systemd's StateDirectory= sets; else /var/lib/siteboot as root, ./siteboot-data otherwise)"`
	Admin   struct {
		Socket    string `yaml:"socket" doc:"admin API Unix socket (default: <data_dir>/siteboot.sock)"`
		Group     string `yaml:"group" doc:"group whose members may use the socket besides root"`
		TCPListen string `yaml:"tcp_listen" doc:"optional admin API TCP address, mutual TLS only"`
		TLS       struct {
			Cert     string `yaml:"cert" doc:"server certificate (PEM) for admin.tcp_listen"`
			Key      string `yaml:"key" doc:"server key (PEM) for admin.tcp_listen"`
			ClientCA string `yaml:"client_ca" doc:"CA bundle (PEM) client certificates must chain to"`
		} `yaml:"tls"`
	} `yaml:"admin"`
	HTTP struct {
		Listen          string   `yaml:"listen" doc:"HTTP address: scripts, boot files, cache, /healthz, /readyz, /metrics"`
		Advertise       string   `yaml:"advertise" doc:"base URL machines use to reach HTTP, at most 57 bytes (default: the address a request arrived at and http.listen's port; never the client's Host header)"`
		MaxConnections  int      `yaml:"max_connections" doc:"open HTTP connections at most; more are answered 503 and closed at once (0: 4096, lowered to fit the file-descriptor limit at two per connection after 1024)"`
		MaxPerSource    int      `yaml:"max_connections_per_source" doc:"open HTTP connections at most from one client address (an IPv6 /64), so that one address cannot take every place; more are answered 503 and closed at once (0: max_connections/8, at least 64; raise it for a NAT or proxy in front of many machines)"`
		ProgressTimeout Duration `yaml:"progress_timeout" doc:"abort a response whose client takes no data for this long (up to twice this while its receive window still fills; a slow but moving one is not cut)"`
	} `yaml:"http"`
	DHCP struct {
		Enabled     string   `yaml:"enabled" doc:"proxyDHCP on UDP 67 and 4011: auto (on; off with a warning when it cannot bind, e.g. not root), true (must run), false"`
		Interfaces  []string `yaml:"interfaces" doc:"interfaces to answer on (default: every up, non-loopback IPv4 interface)"`
		AdvertiseIP string   `yaml:"advertise_ip" doc:"address put into siaddr/option 54 instead of the interface's"`
		Relays      []string `yaml:"relays" doc:"IPv4 CIDRs (or addresses) of DHCP relays answered at their giaddr; without them only on-link relays sending as themselves are"`
	} `yaml:"dhcp"`
	TFTP struct {
		Enabled       string `yaml:"enabled" doc:"TFTP: auto (on; off with a warning when it cannot bind), true (must run), false"`
		Listen        string `yaml:"listen" doc:"TFTP address for the boot files; empty turns TFTP off"`
		MaxBlockSize  int    `yaml:"max_block_size" doc:"largest blksize granted, 512..65464 (1468 fits a 1500-byte MTU)"`
		MaxWindowSize int    `yaml:"max_window_size" doc:"largest windowsize granted (RFC 7440: DATA packets sent before waiting for an ACK), 1..64; 1 is lock step; a window never holds more than 64 KiB"`
		MaxTransfers  int    `yaml:"max_transfers" doc:"TFTP transfers at once; a request beyond is dropped unanswered (the client retries)"`
		MaxPerSource  int    `yaml:"max_per_source" doc:"TFTP transfers at once from one client address"`
	} `yaml:"tftp"`
	Secrets struct {
		Dir       string `yaml:"dir" doc:"the only directory whose files file:// secret refs may name (regular files, no symlinks; never the data dir nor a TLS key)"`
		EnvPrefix string `yaml:"env_prefix" doc:"env:// secret refs may name only variables whose names start with this"`
	} `yaml:"secrets"`
	BootFiles struct {
		Dir       string `yaml:"dir" doc:"first-stage iPXE builds, served to anyone; never the data dir, secrets.dir or a TLS key (default: the first of /usr/lib/ipxe, /usr/share/ipxe)"`
		PreferSNP bool   `yaml:"prefer_snp" doc:"give UEFI clients snponly.efi before ipxe.efi"`
	} `yaml:"boot_files"`
	Ramdisk struct {
		Kernel  string `yaml:"kernel" doc:"ramdisk kernel: an http(s) URL or sha256:HEX from the image cache"`
		Initrd  string `yaml:"initrd" doc:"ramdisk initrd: an http(s) URL or sha256:HEX from the image cache"`
		Cmdline string `yaml:"cmdline" doc:"fixed kernel parameters; initrd= and bc.* are added"`
	} `yaml:"ramdisk"`
	Cache struct {
		Capacity    string `yaml:"capacity" doc:"image cache size bound, e.g. 200GiB or 500G (empty: unbounded)"`
		MinFree     string `yaml:"min_free" doc:"disk space pulls leave free on the data directory's file system, which holds raft.db too, e.g. 5GiB (empty: the larger of 1GiB and 5% of that file system)"`
		Concurrency int    `yaml:"concurrency" doc:"pulls at once"`
		CABundle    string `yaml:"ca_bundle" doc:"extra PEM CA bundle trusted for https image origins"`
		Checkpoint  string `yaml:"checkpoint" doc:"data a pull writes between durable resume points, e.g. 64MiB"`
		FastPath    bool   `yaml:"fast_path" doc:"answer plain GET/HEAD of ready images on http.listen without net/http (same answers, less CPU per request); false sends every request through net/http"`
	} `yaml:"cache"`
	Raft struct {
		Listen string `yaml:"listen" doc:"deprecated name of lease.raft.bind"`
	} `yaml:"raft"`
	Lease struct {
		Mode   string   `yaml:"mode" doc:"where the boot lease comes from: standalone (this appliance alone), cluster (3 or 5 appliances in raft; the leader holds it) or external (a control plane pushes it with UpdateLease / siteboot lease set)"`
		TTL    Duration `yaml:"ttl" doc:"boot lease ttl: a holder that cannot renew within it stops answering (cluster mode: at least 2s)"`
		Margin Duration `yaml:"margin" doc:"cluster mode: a new holder waits lease.ttl plus this after winning before it answers, for clock rate differences"`
		Raft   struct {
			Bind      string   `yaml:"bind" doc:"raft TCP address peers dial; empty runs a single voter with no listener; anything but loopback needs lease.raft.tls.*; required in cluster mode"`
			Advertise string   `yaml:"advertise" doc:"cluster mode: the raft address the other voters dial, and this voter's raft id (default: lease.raft.bind)"`
			Join      []string `yaml:"join" doc:"cluster mode: the raft addresses (lease.raft.advertise) of the other voters, 2 or 4 of them; every voter lists the others"`
			TLS       struct {
				CA   string `yaml:"ca" doc:"CA bundle (PEM) every raft peer's certificate must chain to; use a CA that issues only appliance certificates"`
				Cert string `yaml:"cert" doc:"this appliance's raft certificate (PEM), for server and client auth, naming the lease.raft.bind address"`
				Key  string `yaml:"key" doc:"key (PEM) of lease.raft.tls.cert"`
			} `yaml:"tls"`
		} `yaml:"raft"`
	} `yaml:"lease"`
	BMC struct {
		Networks      []string `yaml:"networks" doc:"CIDRs (or addresses) BMCs may have; a BMC operation to any other address is refused (forbidden-target) before a packet is sent; empty refuses every BMC operation. httpProxy never reaches these."`
		Timeout       Duration `yaml:"timeout" doc:"deadline of one BMC operation, the wait for a busy BMC included (1s..10m); ipmitool is killed at it"`
		MaxOperations int      `yaml:"max_operations" doc:"BMC operations at once over all BMCs (one at a time per BMC); more are refused (busy)"`
		Ipmitool      string   `yaml:"ipmitool" doc:"the ipmitool binary the ipmi driver runs (a name on PATH or a path)"`
	} `yaml:"bmc"`
	HTTPProxy struct {
		ProvisioningNetworks []string `yaml:"provisioning_networks" doc:"CIDRs (or addresses) where httpProxy may use plain http; elsewhere https only"`
		MaxResponseBytes     string   `yaml:"max_response_bytes" doc:"httpProxy response body cap, e.g. 1MiB (at most 3MiB: the response is one admin API message); a longer body is cut and marked truncated"`
		Timeout              Duration `yaml:"timeout" doc:"httpProxy timeout of a request without timeout_ms (1s..5m)"`
		MaxRequests          int      `yaml:"max_requests" doc:"httpProxy requests at once; more are refused (busy)"`
	} `yaml:"httpproxy"`
	Entries struct {
		DefaultTTL Duration `yaml:"default_ttl" doc:"not_after of an entry that has none: now + this"`
		MaxTTL     Duration `yaml:"max_ttl" doc:"refuse a not_after further ahead than this (0: no bound)"`
	} `yaml:"entries"`
	Log struct {
		Level  string `yaml:"level" doc:"debug, info, warn or error"`
		Format string `yaml:"format" doc:"text or json"`
	} `yaml:"log"`
}

// Duration is a time.Duration written as "90s", "24h" in YAML and env.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return d.Set(n.Value)
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Set parses a duration.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (like 90s, 24h)", s)
	}
	*d = Duration(v)
	return nil
}

// DefaultConfig is the embedded configuration: what `siteboot serve` runs
// with when no file, variable or flag says otherwise.
func DefaultConfig() Config {
	var c Config
	c.SiteID = "default"
	c.Admin.Group = "siteboot"
	c.HTTP.Listen = ":8080"
	c.DHCP.Enabled = "auto"
	c.TFTP.Enabled = "auto"
	c.TFTP.Listen = ":69"
	c.TFTP.MaxBlockSize = tftpd.DefaultMaxBlockSize
	c.TFTP.MaxWindowSize = tftpd.DefaultMaxWindowSize
	c.TFTP.MaxTransfers = tftpd.DefaultMaxTransfers
	c.TFTP.MaxPerSource = tftpd.DefaultMaxPerSource
	c.Secrets.Dir = secretref.DefaultDir
	c.Secrets.EnvPrefix = secretref.DefaultEnvPrefix
	c.Cache.Concurrency = 2
	c.Cache.Checkpoint = "64MiB"
	c.Cache.FastPath = true
	c.HTTP.ProgressTimeout = Duration(httpserver.DefaultProgressTimeout)
	c.Lease.Mode = string(lease.Standalone)
	c.Lease.TTL = Duration(10 * time.Second)
	c.Lease.Margin = Duration(time.Second)
	c.Entries.DefaultTTL = Duration(24 * time.Hour)
	c.BMC.Timeout = Duration(bmc.DefaultTimeout)
	c.BMC.MaxOperations = bmc.DefaultMaxOperations
	c.BMC.Ipmitool = "ipmitool"
	c.HTTPProxy.MaxResponseBytes = "1MiB"
	c.HTTPProxy.Timeout = Duration(httpproxy.DefaultTimeout)
	c.HTTPProxy.MaxRequests = httpproxy.DefaultMaxRequests
	c.Log.Level = "info"
	c.Log.Format = "text"
	return c
}

// DefaultDataDir is the directory systemd made for the service
// (StateDirectory= sets $STATE_DIRECTORY, its first entry is ours), else
// /var/lib/siteboot for root, ./siteboot-data otherwise. So a unit running
// as its own user with a config that names no data_dir (a config drive's,
// an operator's short file) keeps its data where systemd keeps it, not in
// the read-only working directory.
func DefaultDataDir() string {
	if d, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	if os.Geteuid() == 0 {
		return "/var/lib/siteboot"
	}
	return "siteboot-data"
}

// Finish fills the defaults that depend on other values (data dir, socket,
// node id) and checks the result; every error names the key.
func (c *Config) Finish() error {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("config: data_dir: %w", err)
	}
	c.DataDir = abs
	if c.Admin.Socket == "" {
		c.Admin.Socket = filepath.Join(c.DataDir, "siteboot.sock")
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("config: node_id is empty and the hostname is unknown: %w", err)
		}
		c.NodeID = h
	}
	if c.Lease.Raft.Bind == "" {
		c.Lease.Raft.Bind = c.Raft.Listen
	}
	return c.check()
}

// raftTLS is the raft transport's TLS files.
func (c *Config) raftTLS() lease.TLSFiles {
	t := c.Lease.Raft.TLS
	return lease.TLSFiles{CA: t.CA, Cert: t.Cert, Key: t.Key}
}

func (c *Config) check() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.SiteID == "" {
		bad("site_id", "is required")
	}
	if c.Admin.TCPListen != "" && (c.Admin.TLS.Cert == "" || c.Admin.TLS.Key == "" || c.Admin.TLS.ClientCA == "") {
		bad("admin.tcp_listen", "needs admin.tls.cert, admin.tls.key and admin.tls.client_ca (mutual TLS only)")
	}
	for key, v := range map[string]string{"dhcp.enabled": c.DHCP.Enabled, "tftp.enabled": c.TFTP.Enabled} {
		if v != "auto" && v != "true" && v != "false" {
			bad(key, "%q: want auto, true or false", v)
		}
	}
	if c.DHCP.AdvertiseIP != "" {
		if ip := net.ParseIP(c.DHCP.AdvertiseIP); ip == nil || ip.To4() == nil {
			bad("dhcp.advertise_ip", "%q is not an IPv4 address", c.DHCP.AdvertiseIP)
		}
	}
	if _, err := ParseRelays(c.DHCP.Relays); err != nil {
		bad("dhcp.relays", "%v", err)
	}
	var te *tftpd.ConfigError
	if err := c.TFTPConfig(nil).Check(); errors.As(err, &te) {
		bad(tftpKey(te.Field), "%v", te.Err)
	}
	var pe *secretref.PolicyError
	if err := c.SecretPolicy().Validate(); errors.As(err, &pe) {
		bad("secrets."+pe.Field, "%v", pe.Err)
	} else if err != nil {
		bad("secrets.dir", "%v", err)
	}
	if err := c.checkBootFilesDir(); err != nil {
		bad("boot_files.dir", "%v", err)
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		bad("http.listen", "%q: %v", c.HTTP.Listen, err)
	}
	if c.HTTP.MaxConnections < 0 || c.HTTP.MaxConnections > 1_000_000 {
		bad("http.max_connections", "%d: want 0 (automatic) to 1000000", c.HTTP.MaxConnections)
	}
	if c.HTTP.MaxPerSource < 0 || c.HTTP.MaxPerSource > 1_000_000 {
		bad("http.max_connections_per_source", "%d: want 0 (automatic) to 1000000", c.HTTP.MaxPerSource)
	}
	if c.HTTP.ProgressTimeout < Duration(time.Second) {
		bad("http.progress_timeout", "%s: at least 1s", time.Duration(c.HTTP.ProgressTimeout))
	}
	if n, err := parseSize(c.Cache.Checkpoint); err == nil && n < 1<<20 {
		bad("cache.checkpoint", "%q: at least 1MiB", c.Cache.Checkpoint)
	}
	for key, v := range map[string]string{"cache.capacity": c.Cache.Capacity, "cache.min_free": c.Cache.MinFree, "cache.checkpoint": c.Cache.Checkpoint} {
		if _, err := parseSize(v); err != nil {
			bad(key, "%v", err)
		}
	}
	if c.Cache.Concurrency < 1 || c.Cache.Concurrency > 64 {
		bad("cache.concurrency", "%d: want 1..64", c.Cache.Concurrency)
	}
	if c.Raft.Listen != "" && c.Raft.Listen != c.Lease.Raft.Bind {
		bad("raft.listen", "is the deprecated name of lease.raft.bind; set only lease.raft.bind")
	}
	for _, err := range c.checkLease() {
		key := "lease.raft"
		if te, ok := errors.AsType[*lease.TransportError](err); ok {
			key, err = "lease.raft."+te.Field, errors.New(te.Reason)
			if te.Field == "bind" && c.Raft.Listen != "" {
				key = "raft.listen"
			}
		} else if ke, ok := errors.AsType[*keyError](err); ok {
			key, err = ke.key, errors.New(ke.reason)
		}
		bad(key, "%v", err)
	}
	for _, ke := range c.checkRelays() {
		bad(ke.key, "%s", ke.reason)
	}
	if c.Entries.DefaultTTL <= 0 {
		bad("entries.default_ttl", "must be positive")
	}
	if c.Entries.MaxTTL < 0 || (c.Entries.MaxTTL > 0 && c.Entries.MaxTTL < c.Entries.DefaultTTL) {
		bad("entries.max_ttl", "must be 0 or at least entries.default_ttl")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		bad("log.format", "%q: want text or json", c.Log.Format)
	}
	return errors.Join(errs...)
}

// LookupGroup returns the gid of the admin group, or -1 when it does not
// exist (the socket then admits root only).
func LookupGroup(name string) int {
	if name == "" {
		return -1
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return -1
	}
	var gid int
	if _, err := fmt.Sscan(g.Gid, &gid); err != nil {
		return -1
	}
	return gid
}

// parseSize is imagecache.ParseSize with "" meaning 0.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return imagecache.ParseSize(s)
}

// ParseRelays reads dhcp.relays: IPv4 prefixes, a bare address meaning /32.
func ParseRelays(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not an IPv4 CIDR or address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("%q is not IPv4", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// tftpKey names the config key of a tftpd.Config field TFTPConfig sets.
func tftpKey(field string) string {
	switch field {
	case "MaxBlockSize":
		return "tftp.max_block_size"
	case "MaxWindowSize":
		return "tftp.max_window_size"
	case "MaxTransfers":
		return "tftp.max_transfers"
	case "MaxPerSource":
		return "tftp.max_per_source"
	}
	return "tftp"
}

// TFTPConfig is the TFTP server's configuration; the config check and the
// appliance use the same one, so a value the check accepts is one
// tftpd.New accepts.
func (c *Config) TFTPConfig(files tftpd.Files) tftpd.Config {
	return tftpd.Config{Files: files, MaxBlockSize: c.TFTP.MaxBlockSize, MaxWindowSize: c.TFTP.MaxWindowSize,
		MaxTransfers: c.TFTP.MaxTransfers, MaxPerSource: c.TFTP.MaxPerSource}
}

// SecretPolicy confines secret refs to secrets.dir and secrets.env_prefix,
// never the data dir (it holds the node key) nor the TLS keys: whoever may
// add an entry may name any resolvable ref as its token and fetch it over
// HTTP.
func (c *Config) SecretPolicy() secretref.Policy {
	// The node key by name too: a file bind-mounted elsewhere is matched by
	// its identity only when it is itself a denied path.
	deny := []string{c.DataDir, filepath.Join(c.DataDir, "node.key")}
	for _, key := range []string{c.Admin.TLS.Key, c.Lease.Raft.TLS.Key} {
		if abs, err := filepath.Abs(key); key != "" && err == nil {
			deny = append(deny, abs)
		}
	}
	return secretref.Policy{Dir: c.Secrets.Dir, EnvPrefix: c.Secrets.EnvPrefix, Deny: deny}
}

// checkBootFilesDir refuses a boot_files.dir that is or contains a place
// holding secrets: its files are served to anyone over TFTP and HTTP, so
// the data dir would serve the node key. Paths are compared as written and
// as symlinks resolve them.
func (c *Config) checkBootFilesDir() error {
	if c.BootFiles.Dir == "" {
		return nil
	}
	dir, err := filepath.Abs(c.BootFiles.Dir)
	if err != nil {
		return err
	}
	private := []struct{ key, path string }{
		{"data_dir", c.DataDir}, {"secrets.dir", c.Secrets.Dir},
		{"admin.tls.key", c.Admin.TLS.Key}, {"lease.raft.tls.key", c.Lease.Raft.TLS.Key},
	}
	for _, p := range private {
		abs, err := filepath.Abs(p.path)
		if p.path == "" || err != nil {
			continue
		}
		if holds(dir, abs) || holds(resolved(dir), resolved(abs)) {
			return fmt.Errorf("%s is served to anyone over TFTP and HTTP; it may not hold %s (%s)", c.BootFiles.Dir, p.key, p.path)
		}
	}
	return nil
}

// holds reports whether clean absolute path p is dir or lies beneath it.
func holds(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// resolved is p with the symlinks of its longest existing prefix resolved.
func resolved(p string) string {
	rest := ""
	for cur := filepath.Clean(p); ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return filepath.Clean(p)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
