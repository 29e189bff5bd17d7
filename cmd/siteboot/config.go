package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/siteboot/siteboot/imagecache"
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
	DataDir string `yaml:"data_dir" doc:"state directory (default: /var/lib/siteboot as root, else ./siteboot-data)"`
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
		Listen    string `yaml:"listen" doc:"HTTP address: scripts, boot files, cache, /healthz, /readyz, /metrics"`
		Advertise string `yaml:"advertise" doc:"base URL machines use to reach HTTP (default: the arrival interface's address and http.listen's port)"`
	} `yaml:"http"`
	DHCP struct {
		Enabled     string   `yaml:"enabled" doc:"proxyDHCP on UDP 67 and 4011: auto (on; off with a warning when it cannot bind, e.g. not root), true (must run), false"`
		Interfaces  []string `yaml:"interfaces" doc:"interfaces to answer on (default: every up, non-loopback IPv4 interface)"`
		AdvertiseIP string   `yaml:"advertise_ip" doc:"address put into siaddr/option 54 instead of the interface's"`
	} `yaml:"dhcp"`
	TFTP struct {
		Enabled      string `yaml:"enabled" doc:"TFTP: auto (on; off with a warning when it cannot bind), true (must run), false"`
		Listen       string `yaml:"listen" doc:"TFTP address for the boot files; empty turns TFTP off"`
		MaxBlockSize int    `yaml:"max_block_size" doc:"largest blksize granted, 512..65464 (1468 fits a 1500-byte MTU)"`
		MaxTransfers int    `yaml:"max_transfers" doc:"TFTP transfers at once; a request beyond is dropped unanswered (the client retries)"`
		MaxPerSource int    `yaml:"max_per_source" doc:"TFTP transfers at once from one client address"`
	} `yaml:"tftp"`
	Secrets struct {
		Dir       string `yaml:"dir" doc:"the only directory whose files file:// secret refs may name (regular files, no symlinks; never the data dir)"`
		EnvPrefix string `yaml:"env_prefix" doc:"env:// secret refs may name only variables whose names start with this"`
	} `yaml:"secrets"`
	BootFiles struct {
		Dir       string `yaml:"dir" doc:"first-stage iPXE builds (default: the first of /usr/lib/ipxe, /usr/share/ipxe)"`
		PreferSNP bool   `yaml:"prefer_snp" doc:"give UEFI clients snponly.efi before ipxe.efi"`
	} `yaml:"boot_files"`
	Ramdisk struct {
		Kernel  string `yaml:"kernel" doc:"ramdisk kernel: an http(s) URL or sha256:HEX from the image cache"`
		Initrd  string `yaml:"initrd" doc:"ramdisk initrd: an http(s) URL or sha256:HEX from the image cache"`
		Cmdline string `yaml:"cmdline" doc:"fixed kernel parameters; initrd= and bc.* are added"`
	} `yaml:"ramdisk"`
	Cache struct {
		Capacity    string `yaml:"capacity" doc:"image cache size bound, e.g. 200GiB or 500G (empty: unbounded)"`
		MinFree     string `yaml:"min_free" doc:"disk space a pull must leave free, e.g. 5GiB"`
		Concurrency int    `yaml:"concurrency" doc:"pulls at once"`
		CABundle    string `yaml:"ca_bundle" doc:"extra PEM CA bundle trusted for https image origins"`
		Checkpoint  string `yaml:"checkpoint" doc:"data a pull writes between durable resume points, e.g. 64MiB"`
		FastPath    bool   `yaml:"fast_path" doc:"answer plain GET/HEAD of ready images on http.listen without net/http (same answers, less CPU per request); false sends every request through net/http"`
	} `yaml:"cache"`
	Raft struct {
		Listen string `yaml:"listen" doc:"raft TCP address; empty runs a single voter with no listener"`
	} `yaml:"raft"`
	Lease struct {
		TTL Duration `yaml:"ttl" doc:"boot lease ttl"`
	} `yaml:"lease"`
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

func defaultConfig() Config {
	var c Config
	c.SiteID = "default"
	c.Admin.Group = "siteboot"
	c.HTTP.Listen = ":8080"
	c.DHCP.Enabled = "auto"
	c.TFTP.Enabled = "auto"
	c.TFTP.Listen = ":69"
	c.TFTP.MaxBlockSize = tftpd.DefaultMaxBlockSize
	c.TFTP.MaxTransfers = tftpd.DefaultMaxTransfers
	c.TFTP.MaxPerSource = tftpd.DefaultMaxPerSource
	c.Secrets.Dir = secretref.DefaultDir
	c.Secrets.EnvPrefix = secretref.DefaultEnvPrefix
	c.Cache.Concurrency = 2
	c.Cache.Checkpoint = "64MiB"
	c.Cache.FastPath = true
	c.Lease.TTL = Duration(10 * time.Second)
	c.Entries.DefaultTTL = Duration(24 * time.Hour)
	c.Log.Level = "info"
	c.Log.Format = "text"
	return c
}

// defaultDataDir is /var/lib/siteboot for root, ./siteboot-data otherwise.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/siteboot"
	}
	return "siteboot-data"
}

// loadConfig reads file (if any) over the defaults, then the environment.
// Unknown keys in the file are errors, naming the key.
func loadConfig(file string, env func(string) (string, bool)) (Config, error) {
	c := defaultConfig()
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("config %s: %w", file, err)
		}
	}
	var errs []error
	walkConfig(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value, _ reflect.StructField) {
		name := envName(key)
		v, ok := env(name)
		if !ok {
			return
		}
		if err := setField(f, v); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", name, err))
		}
	})
	return c, errors.Join(errs...)
}

// finish fills the defaults that depend on other values and checks the
// result.
func (c *Config) finish() error {
	if c.DataDir == "" {
		c.DataDir = defaultDataDir()
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
	return c.check()
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
	var te *tftpd.ConfigError
	if err := c.tftpConfig(nil).Check(); errors.As(err, &te) {
		bad(tftpKey(te.Field), "%v", te.Err)
	}
	var pe *secretref.PolicyError
	if err := c.secretPolicy().Validate(); errors.As(err, &pe) {
		bad("secrets."+pe.Field, "%v", pe.Err)
	} else if err != nil {
		bad("secrets.dir", "%v", err)
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		bad("http.listen", "%q: %v", c.HTTP.Listen, err)
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
	if c.Lease.TTL <= 0 {
		bad("lease.ttl", "must be positive")
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

// tftpKey names the config key of a tftpd.Config field tftpConfig sets.
func tftpKey(field string) string {
	switch field {
	case "MaxBlockSize":
		return "tftp.max_block_size"
	case "MaxTransfers":
		return "tftp.max_transfers"
	case "MaxPerSource":
		return "tftp.max_per_source"
	}
	return "tftp"
}

// tftpConfig is the TFTP server's configuration; check and bindTFTP use
// the same one, so a value check accepts is one tftpd.New accepts.
func (c *Config) tftpConfig(files tftpd.Files) tftpd.Config {
	return tftpd.Config{Files: files, MaxBlockSize: c.TFTP.MaxBlockSize, MaxTransfers: c.TFTP.MaxTransfers, MaxPerSource: c.TFTP.MaxPerSource}
}

// secretPolicy confines secret refs to secrets.dir and secrets.env_prefix,
// never the data dir (it holds the node key).
func (c *Config) secretPolicy() secretref.Policy {
	return secretref.Policy{Dir: c.Secrets.Dir, EnvPrefix: c.Secrets.EnvPrefix, Deny: []string{c.DataDir}}
}

// lookupGroup returns the gid of the admin group, or -1 when it does not
// exist (the socket then admits root only).
func lookupGroup(name string) int {
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

func envName(key string) string {
	return "SITEBOOT_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// walkConfig calls fn for every leaf field of a config struct with its
// dotted key.
func walkConfig(v reflect.Value, prefix string, fn func(key string, f reflect.Value, sf reflect.StructField)) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		key := strings.Split(sf.Tag.Get("yaml"), ",")[0]
		if prefix != "" {
			key = prefix + "." + key
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(Duration(0)) {
			walkConfig(f, key, fn)
			continue
		}
		fn(key, f, sf)
	}
}

func setField(f reflect.Value, s string) error {
	switch p := f.Addr().Interface().(type) {
	case *string:
		*p = s
	case *Duration:
		return p.Set(s)
	case *bool:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*p = v
	case *[]string:
		*p = nil
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				*p = append(*p, part)
			}
		}
	default:
		return fmt.Errorf("unsupported config type %s", f.Type())
	}
	return nil
}

// configReference is the key list --help prints.
func configReference() string {
	var b strings.Builder
	c := defaultConfig()
	walkConfig(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value, sf reflect.StructField) {
		def := fmt.Sprint(f.Interface())
		if d, ok := f.Interface().(Duration); ok {
			def = time.Duration(d).String()
		}
		if def == "" || def == "[]" {
			def = "-"
		}
		fmt.Fprintf(&b, "  %-22s %-30s default %s\n      %s\n", key, envName(key), def, sf.Tag.Get("doc"))
	})
	return b.String()
}

// parseSize is imagecache.ParseSize with "" meaning 0.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return imagecache.ParseSize(s)
}
