package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/tftpd"
	"github.com/spf13/cobra"
)

func envOf(m map[string]string) env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
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
	if err := cfg.finish(); err != nil {
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
	if err := cfg.finish(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	wantDir, _ := filepath.Abs(defaultDataDir())
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
		{"interfaces env list", "", map[string]string{"SITEBOOT_DHCP_INTERFACES": "eth0,eth1", "SITEBOOT_LOG_LEVEL": "loud"}, "log.level"},
		{"secrets dir inside the data dir", "secrets:\n  dir: " + dir + "/secrets\n", nil, "secrets.dir: " + dir + "/secrets overlaps " + dir},
		{"secrets dir is the data dir", "", map[string]string{"SITEBOOT_SECRETS_DIR": dir}, "secrets.dir"},
		{"secrets dir contains the data dir", "secrets:\n  dir: " + filepath.Dir(dir) + "\n", nil, "secrets.dir"},
		{"secrets dir relative", "secrets:\n  dir: secrets\n", nil, `secrets.dir: "secrets" must be an absolute`},
		{"tftp max transfers", "tftp:\n  max_transfers: -1\n", nil, "tftp.max_transfers: -1 is outside 1..16384"},
		{"tftp max per source", "", map[string]string{"SITEBOOT_TFTP_MAX_PER_SOURCE": "-2"}, "tftp.max_per_source"},
		{"tftp block size", "tftp:\n  max_block_size: 511\n", nil, "tftp.max_block_size: 511 is outside 512..65464"},
		{"secrets env prefix", "", map[string]string{"SITEBOOT_SECRETS_ENV_PREFIX": "MY-"}, "secrets.env_prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, dir, "c.yaml", tt.yaml)
			cfg, err := loadConfig(file, envOf(tt.env))
			if err == nil {
				cfg.DataDir = dir
				err = cfg.finish()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v; want containing %q", err, tt.want)
			}
		})
	}
}

func TestServeHelpTeachesEveryKey(t *testing.T) {
	help := configReference()
	for _, key := range []string{"site_id", "node_id", "data_dir", "admin.socket", "http.listen", "SITEBOOT_ADMIN_SOCKET", "entries.default_ttl"} {
		if !strings.Contains(help, key) {
			t.Errorf("serve --help lacks %q", key)
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
	for _, v := range []int{-1, 0, 1, 256, 16384, 16385} {
		tests = append(tests,
			setting{fmt.Sprintf("max_transfers %d", v), func(c *Config) { c.TFTP.MaxTransfers = v }},
			setting{fmt.Sprintf("max_per_source %d", v), func(c *Config) { c.TFTP.MaxPerSource = v }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.DataDir = t.TempDir()
			tc.set(&cfg)
			checkErr := cfg.finish()
			_, newErr := tftpd.New(tftpd.Config{Files: set, MaxBlockSize: cfg.TFTP.MaxBlockSize,
				MaxTransfers: cfg.TFTP.MaxTransfers, MaxPerSource: cfg.TFTP.MaxPerSource})
			if (checkErr == nil) != (newErr == nil) {
				t.Errorf("config check: %v; tftpd.New: %v", checkErr, newErr)
			}
		})
	}
}
