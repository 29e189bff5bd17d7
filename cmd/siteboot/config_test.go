package main

import (
	"fmt"
	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/internal/logbuf"
	"github.com/siteboot/siteboot/tftpd"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

func envOf(m map[string]string) env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// linkTo is a symlink to target in a new temporary directory.
func linkTo(t *testing.T, target string) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", `
site_id: from-file
node_id: node-file
data_dir: /from/file
http:
  listen: ":9000"
admin:
  socket: /file.sock
entries:
  default_ttl: 6h
`)
	cfg, err := loadConfig(file, envOf(map[string]string{
		"SITEBOOT_NODE_ID":             "node-env",
		"SITEBOOT_HTTP_LISTEN":         ":9100",
		"SITEBOOT_ENTRIES_DEFAULT_TTL": "3h",
		"SITEBOOT_UNRELATED":           "x",
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Flags win over both.
	var f serveFlags
	cmd := &cobra.Command{}
	cmd.Flags().StringVar(&f.httpListen, "http-listen", "", "")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "")
	cmd.Flags().StringVar(&f.socket, "admin-socket", "", "")
	cmd.Flags().StringVar(&f.siteID, "site-id", "", "")
	cmd.Flags().StringVar(&f.nodeID, "node-id", "", "")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "", "")
	if err := cmd.Flags().Parse([]string{"--http-listen", "127.0.0.1:9200"}); err != nil {
		t.Fatal(err)
	}
	f.apply(cmd, &cfg)
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"site_id": cfg.SiteID, "node_id": cfg.NodeID, "data_dir": cfg.DataDir, "http.listen": cfg.HTTP.Listen,
		"admin.socket": cfg.Admin.Socket, "entries.default_ttl": time.Duration(cfg.Entries.DefaultTTL).String(),
		"lease.ttl": time.Duration(cfg.Lease.TTL).String(), "admin.group": cfg.Admin.Group,
	}
	want := map[string]string{
		"site_id": "from-file", "node_id": "node-env", "data_dir": "/from/file", "http.listen": "127.0.0.1:9200",
		"admin.socket": "/file.sock", "entries.default_ttl": "3h0m0s", "lease.ttl": "10s", "admin.group": "siteboot",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("effective config (-want +got):\n%s", diff)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := loadConfig("", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	wantDir, _ := filepath.Abs(appliance.DefaultDataDir())
	if cfg.DataDir != wantDir || cfg.Admin.Socket != filepath.Join(wantDir, "siteboot.sock") ||
		cfg.HTTP.Listen != ":8080" || cfg.NodeID != host || cfg.SiteID != "default" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if os.Geteuid() == 0 && cfg.DataDir != "/var/lib/siteboot" {
		t.Fatalf("root data dir = %s", cfg.DataDir)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"unknown key", "http:\n  listn: ':1'\n", nil, "field listn not found"},
		{"bad duration in file", "lease:\n  ttl: soon\n", nil, `"soon" is not a duration`},
		{"bad duration in env", "", map[string]string{"SITEBOOT_LEASE_TTL": "x"}, "SITEBOOT_LEASE_TTL"},
		{"bad log level", "log:\n  level: loud\n", nil, "log.level"},
		{"max below default", "entries:\n  max_ttl: 1h\n", nil, "entries.max_ttl"},
		{"empty site", "site_id: ''\n", nil, "site_id: is required"},
		{"dhcp enabled word", "dhcp:\n  enabled: maybe\n", nil, `dhcp.enabled: "maybe": want auto, true or false`},
		{"tftp enabled env", "", map[string]string{"SITEBOOT_TFTP_ENABLED": "yes"}, "tftp.enabled"},
		{"advertise ip", "dhcp:\n  advertise_ip: fe80::1\n", nil, "dhcp.advertise_ip"},
		{"cache capacity", "cache:\n  capacity: lots\n", nil, "cache.capacity"},
		{"relay not a cidr", "dhcp:\n  relays: [10.1.0.0/24, relay-a]\n", nil, `dhcp.relays: "relay-a" is not an IPv4 CIDR`},
		{"relay ipv6", "", map[string]string{"SITEBOOT_DHCP_RELAYS": "fd00::/64"}, "dhcp.relays"},
		{"negative max connections", "http:\n  max_connections: -1\n", nil, "http.max_connections"},
		{"negative max connections per source", "http:\n  max_connections_per_source: -1\n", nil, "http.max_connections_per_source"},
		{"progress timeout too short", "", map[string]string{"SITEBOOT_HTTP_PROGRESS_TIMEOUT": "10ms"}, "http.progress_timeout: 10ms: at least 1s"},
		{"secrets dir inside the data dir", "secrets:\n  dir: " + dir + "/secrets\n", nil, "secrets.dir: " + dir + "/secrets overlaps " + dir},
		{"secrets dir is the data dir", "", map[string]string{"SITEBOOT_SECRETS_DIR": dir}, "secrets.dir"},
		{"secrets dir contains the data dir", "secrets:\n  dir: " + filepath.Dir(dir) + "\n", nil, "secrets.dir"},
		// A TLS key in the secrets dir could be set as an entry's token
		// ref and fetched over HTTP by anyone who may add entries.
		{"raft tls key in the secrets dir", "secrets:\n  dir: /etc/sb-secrets\nlease:\n  raft:\n    bind: 10.0.0.2:7390\n    tls:\n      ca: /etc/sb/ca.pem\n      cert: /etc/sb/raft.pem\n      key: /etc/sb-secrets/raft.key\n", nil, "secrets.dir: /etc/sb-secrets overlaps /etc/sb-secrets/raft.key"},
		{"admin tls key in the secrets dir", "", map[string]string{"SITEBOOT_SECRETS_DIR": "/etc/sb-secrets", "SITEBOOT_ADMIN_TLS_KEY": "/etc/sb-secrets/tls/admin.key"}, "secrets.dir: /etc/sb-secrets overlaps /etc/sb-secrets/tls/admin.key"},
		{"secrets dir relative", "secrets:\n  dir: secrets\n", nil, `secrets.dir: "secrets" must be an absolute`},
		// Boot files are served to anyone on the network.
		{"boot files dir is the data dir", "", map[string]string{"SITEBOOT_BOOT_FILES_DIR": dir}, "boot_files.dir: " + dir + " is served to anyone"},
		{"boot files dir contains the data dir", "boot_files:\n  dir: " + filepath.Dir(dir) + "\n", nil, "boot_files.dir"},
		{"boot files dir links to the data dir", "", map[string]string{"SITEBOOT_BOOT_FILES_DIR": linkTo(t, dir)}, "boot_files.dir"},
		{"boot files dir contains secrets.dir", "", map[string]string{"SITEBOOT_BOOT_FILES_DIR": "/etc/sb", "SITEBOOT_SECRETS_DIR": "/etc/sb/secrets"}, "boot_files.dir: /etc/sb is served to anyone over TFTP and HTTP; it may not hold secrets.dir"},
		{"boot files dir holds a tls key", "", map[string]string{"SITEBOOT_BOOT_FILES_DIR": "/etc/sb-boot", "SITEBOOT_ADMIN_TLS_KEY": "/etc/sb-boot/admin.key"}, "boot_files.dir"},
		{"tftp max transfers", "tftp:\n  max_transfers: -1\n", nil, "tftp.max_transfers: -1 is outside 1..16384"},
		{"tftp max per source", "", map[string]string{"SITEBOOT_TFTP_MAX_PER_SOURCE": "-2"}, "tftp.max_per_source"},
		{"tftp block size", "tftp:\n  max_block_size: 511\n", nil, "tftp.max_block_size: 511 is outside 512..65464"},
		{"tftp window size", "tftp:\n  max_window_size: 65\n", nil, "tftp.max_window_size: 65 is outside 1..64"},
		{"tftp window size env", "", map[string]string{"SITEBOOT_TFTP_MAX_WINDOW_SIZE": "-1"}, "tftp.max_window_size"},
		{"secrets env prefix", "", map[string]string{"SITEBOOT_SECRETS_ENV_PREFIX": "MY-"}, "secrets.env_prefix"},
		{"interfaces env list", "", map[string]string{"SITEBOOT_DHCP_INTERFACES": "eth0,eth1", "SITEBOOT_LOG_LEVEL": "loud"}, "log.level"},
		{"raft bind without tls", "lease:\n  raft:\n    bind: 10.0.0.2:7390\n", nil, "lease.raft.bind: \"10.0.0.2:7390\" is not a loopback address"},
		{"raft bind env without tls", "", map[string]string{"SITEBOOT_LEASE_RAFT_BIND": "192.0.2.2:7390"}, "lease.raft.bind"},
		{"deprecated raft.listen without tls", "raft:\n  listen: 10.0.0.2:7390\n", nil, "raft.listen: \"10.0.0.2:7390\" is not a loopback address"},
		{"raft bind every address", "lease:\n  raft:\n    bind: ':7390'\n", nil, "lease.raft.bind"},
		{"raft tls without key", "lease:\n  raft:\n    tls:\n      ca: /ca.pem\n      cert: /c.pem\n", nil, "lease.raft.tls.key: is missing"},
		{"bmc network not a cidr", "bmc:\n  networks: [10.20.0.0/24, bmc-net]\n", nil, `bmc.networks: "bmc-net" is not a CIDR or an IP address`},
		{"bmc network every address", "", map[string]string{"SITEBOOT_BMC_NETWORKS": "10.20.0.0/24,0.0.0.0/0"}, `bmc.networks: "0.0.0.0/0" is every address`},
		{"bmc network with a zone", "bmc:\n  networks: ['fe80::1%eth0']\n", nil, "bmc.networks"},
		{"bmc network ipv4-mapped", "bmc:\n  networks: ['::ffff:10.20.0.0/120']\n", nil, "bmc.networks: \"::ffff:10.20.0.0/120\" is IPv4-mapped IPv6"},
		{"bmc timeout zero", "bmc:\n  timeout: 0s\n", nil, "bmc.timeout: 0s: want 1s..10m0s"},
		{"bmc timeout too long", "", map[string]string{"SITEBOOT_BMC_TIMEOUT": "11m"}, "bmc.timeout: 11m0s"},
		{"bmc max operations", "bmc:\n  max_operations: 0\n", nil, "bmc.max_operations: 0: want 1..1024"},
		{"bmc ipmitool empty", "", map[string]string{"SITEBOOT_BMC_IPMITOOL": ""}, "bmc.ipmitool: is empty"},
		{"provisioning network", "httpproxy:\n  provisioning_networks: [10.0.0.0/33]\n", nil, `httpproxy.provisioning_networks: "10.0.0.0/33"`},
		{"proxy response cap unit", "httpproxy:\n  max_response_bytes: lots\n", nil, "httpproxy.max_response_bytes"},
		{"proxy response cap too big", "", map[string]string{"SITEBOOT_HTTPPROXY_MAX_RESPONSE_BYTES": "4MiB"}, `httpproxy.max_response_bytes: "4MiB": want 1 byte to 3MiB`},
		{"proxy response cap zero", "httpproxy:\n  max_response_bytes: '0'\n", nil, `httpproxy.max_response_bytes: "0"`},
		{"proxy timeout", "httpproxy:\n  timeout: 6m\n", nil, "httpproxy.timeout: 6m0s: want 1s..5m0s"},
		{"proxy max requests", "", map[string]string{"SITEBOOT_HTTPPROXY_MAX_REQUESTS": "-1"}, "httpproxy.max_requests: -1"},
		{"raft.listen and bind differ", "raft:\n  listen: 127.0.0.1:7390\nlease:\n  raft:\n    bind: 127.0.0.1:7391\n", nil, "raft.listen: is the deprecated name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, dir, "c.yaml", tt.yaml)
			cfg, err := loadConfig(file, envOf(tt.env))
			if err == nil {
				cfg.DataDir = dir
				err = cfg.Finish()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v; want containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigRelays(t *testing.T) {
	got, err := appliance.ParseRelays([]string{"10.1.0.0/24", "10.2.0.7", "10.3.1.9/16"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("10.2.0.7/32"), netip.MustParsePrefix("10.3.0.0/16")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("parseRelays (-want +got):\n%s", diff)
	}
}

func TestServeHelpTeachesEveryKey(t *testing.T) {
	help := configReference()
	for _, key := range []string{"site_id", "node_id", "data_dir", "admin.socket", "http.listen", "SITEBOOT_ADMIN_SOCKET", "entries.default_ttl",
		"lease.raft.bind", "SITEBOOT_LEASE_RAFT_TLS_CA", "lease.raft.tls.cert", "lease.raft.tls.key",
		"bmc.networks", "SITEBOOT_BMC_NETWORKS", "bmc.timeout", "bmc.max_operations", "bmc.ipmitool",
		"httpproxy.provisioning_networks", "httpproxy.max_response_bytes", "httpproxy.timeout", "httpproxy.max_requests"} {
		if !strings.Contains(help, key) {
			t.Errorf("serve --help lacks %q", key)
		}
	}
}

func TestConfigRaftBind(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string
	}{
		{"none", "", ""},
		{"loopback plain", "lease:\n  raft:\n    bind: 127.0.0.1:7390\n", "127.0.0.1:7390"},
		{"deprecated alias", "raft:\n  listen: 127.0.0.1:7390\n", "127.0.0.1:7390"},
		{"alias and the same bind", "raft:\n  listen: 127.0.0.1:7390\nlease:\n  raft:\n    bind: 127.0.0.1:7390\n", "127.0.0.1:7390"},
		{"site address with tls", "lease:\n  raft:\n    bind: 10.0.0.2:7390\n    tls: {ca: /ca.pem, cert: /c.pem, key: /k.pem}\n", "10.0.0.2:7390"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, err := loadConfig(writeFile(t, dir, "c.yaml", tt.yaml), envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			cfg.DataDir = dir
			if err := cfg.Finish(); err != nil {
				t.Fatal(err)
			}
			if cfg.Lease.Raft.Bind != tt.want {
				t.Fatalf("lease.raft.bind = %q; want %q", cfg.Lease.Raft.Bind, tt.want)
			}
		})
	}
}

// TestDeprecatedRaftListenWarnsOnce: an appliance configured with the old
// key runs its raft port there and says once that the key is deprecated.
func TestDeprecatedRaftListenWarnsOnce(t *testing.T) {
	cfg := testConfig(t)
	cfg.Raft.Listen = freePort(t)
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	startApplianceLog(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if n := strings.Count(logs.String(), "raft.listen is deprecated; use lease.raft.bind"); n != 1 {
		t.Fatalf("%d deprecation warnings; want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "plain TCP on loopback; that is for tests only") {
		t.Fatalf("no warning about plain TCP raft:\n%s", logs.String())
	}
}

// TestConfigTFTPWindowSize: tftp.max_window_size defaults to tftpd's
// default and reaches the TFTP server's config from the environment.
func TestConfigTFTPWindowSize(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{nil, tftpd.DefaultMaxWindowSize},
		{map[string]string{"SITEBOOT_TFTP_MAX_WINDOW_SIZE": "1"}, 1},
		{map[string]string{"SITEBOOT_TFTP_MAX_WINDOW_SIZE": "4"}, 4},
	} {
		cfg, err := loadConfig("", envOf(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DataDir = t.TempDir()
		if err := cfg.Finish(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.TFTPConfig(nil).MaxWindowSize; got != tc.want {
			t.Errorf("env %v: MaxWindowSize %d, want %d", tc.env, got, tc.want)
		}
	}
}

// TestConfigTFTPAgreesWithTFTPD: a TFTP setting passes the config check
// exactly when tftpd.New accepts it (max_block_size 512 once passed the
// one and failed the other at start).
func TestConfigTFTPAgreesWithTFTPD(t *testing.T) {
	set, err := images.Load(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	type setting struct {
		name string
		set  func(*Config)
	}
	var tests []setting
	for _, v := range []int{-1, 0, 8, 511, 512, 513, 1468, 65464, 65465} {
		tests = append(tests, setting{fmt.Sprintf("max_block_size %d", v), func(c *Config) { c.TFTP.MaxBlockSize = v }})
	}
	for _, v := range []int{-1, 0, 1, 4, 64, 65} {
		tests = append(tests, setting{fmt.Sprintf("max_window_size %d", v), func(c *Config) { c.TFTP.MaxWindowSize = v }})
	}
	for _, v := range []int{-1, 0, 1, 256, 16384, 16385} {
		tests = append(tests,
			setting{fmt.Sprintf("max_transfers %d", v), func(c *Config) { c.TFTP.MaxTransfers = v }},
			setting{fmt.Sprintf("max_per_source %d", v), func(c *Config) { c.TFTP.MaxPerSource = v }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			cfg.DataDir = t.TempDir()
			tc.set(&cfg)
			checkErr := cfg.Finish()
			_, newErr := tftpd.New(tftpd.Config{Files: set, MaxBlockSize: cfg.TFTP.MaxBlockSize, MaxWindowSize: cfg.TFTP.MaxWindowSize,
				MaxTransfers: cfg.TFTP.MaxTransfers, MaxPerSource: cfg.TFTP.MaxPerSource})
			if (checkErr == nil) != (newErr == nil) {
				t.Errorf("config check: %v; tftpd.New: %v", checkErr, newErr)
			}
		})
	}
}
