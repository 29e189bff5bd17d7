package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The conffile the package installs is a valid configuration that puts
// everything where the unit expects it.
func TestPackagedConfig(t *testing.T) {
	cfg, err := loadConfig("../../packaging/siteboot.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.NodeID = "n" // the packaged one is empty: the hostname
	if err := cfg.Finish(); err != nil {
		t.Fatalf("packaged siteboot.yaml: %v", err)
	}
	got := map[string]string{
		"data_dir": cfg.DataDir, "admin.socket": cfg.Admin.Socket, "admin.group": cfg.Admin.Group,
		"http.listen": cfg.HTTP.Listen, "dhcp.enabled": cfg.DHCP.Enabled, "tftp.listen": cfg.TFTP.Listen,
		"lease.mode": cfg.Lease.Mode, "admin.tcp_listen": cfg.Admin.TCPListen,
	}
	want := map[string]string{
		"data_dir": "/var/lib/siteboot", "admin.socket": "/var/lib/siteboot/siteboot.sock", "admin.group": "siteboot",
		"http.listen": ":8080", "dhcp.enabled": "auto", "tftp.listen": ":69",
		"lease.mode": "standalone", "admin.tcp_listen": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packaged siteboot.yaml (-want +got):\n%s", diff)
	}
}
