package ipxe

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/site"
)

func baseConfig() Config {
	return Config{
		SiteID: testSite, NodeID: testNode, BaseURL: testBase,
		Ramdisk: Ramdisk{Kernel: "sha256:" + kernelHex, Initrd: "http://10.0.0.2:8080/initrd", Cmdline: "quiet"},
		Entries: site.NewState(), Gate: &testGate{}, Signer: goldenSigner{},
	}
}

func TestNewAccepts(t *testing.T) {
	cfg := baseConfig()
	cfg.Ramdisk.Kernel = "sha256:" + strings.ToUpper(kernelHex)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.kernel.resolve(testBase); got != testBase+"/cache/"+kernelHex {
		t.Fatalf("kernel = %q, want the lower-case cache URL", got)
	}
	cfg = baseConfig()
	cfg.Ramdisk = Ramdisk{}
	if _, err := New(cfg); err != nil {
		t.Fatalf("no ramdisk profile: %v", err)
	}
}

func TestNewRefuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(func() Config { c := baseConfig(); c.Metrics = reg; return c }()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"no entries", func(c *Config) { c.Entries = nil }, "needs Entries"},
		{"no gate", func(c *Config) { c.Gate = nil }, "needs Entries, Gate"},
		{"no signer", func(c *Config) { c.Signer = nil }, "Signer"},
		{"no site id", func(c *Config) { c.SiteID = "" }, "SiteID"},
		{"bad node id", func(c *Config) { c.NodeID = "a b" }, "NodeID"},
		{"base URL with space", func(c *Config) { c.BaseURL = "http://a b" }, "BaseURL"},
		{"base URL with query", func(c *Config) { c.BaseURL = "http://a/?x=1" }, "query"},
		{"base URL not http", func(c *Config) { c.BaseURL = "tftp://10.0.0.2" }, "BaseURL"},
		{"kernel bad digest", func(c *Config) { c.Ramdisk.Kernel = "sha256:abc" }, "Ramdisk.Kernel"},
		{"kernel missing", func(c *Config) { c.Ramdisk.Kernel = "" }, "Ramdisk.Kernel"},
		{"initrd unsafe", func(c *Config) { c.Ramdisk.Initrd = "http://a/${x}" }, "Ramdisk.Initrd"},
		{"cmdline comment", func(c *Config) { c.Ramdisk.Cmdline = "#x" }, "Ramdisk.Cmdline"},
		{"metrics registered twice", func(c *Config) { c.Metrics = reg }, "metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := baseConfig()
			tt.mutate(&cfg)
			s, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v, %v; want an error containing %q", s, err, tt.wantErr)
			}
		})
	}
}
