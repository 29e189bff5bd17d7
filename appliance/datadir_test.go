package appliance

import (
	"os"
	"testing"
)

// TestDefaultDataDirFromSystemd: under a unit with StateDirectory= (systemd
// sets $STATE_DIRECTORY), a config without data_dir uses that directory —
// not ./siteboot-data, which under ProtectSystem=strict is read-only.
func TestDefaultDataDirFromSystemd(t *testing.T) {
	fallback := "siteboot-data"
	if os.Geteuid() == 0 {
		fallback = "/var/lib/siteboot"
	}
	for _, tc := range []struct{ env, want string }{
		{"/srv/state/siteboot", "/srv/state/siteboot"},
		{"/srv/state/siteboot:/srv/state/other", "/srv/state/siteboot"},
		{"/srv/state/siteboot/", "/srv/state/siteboot"},
		{"", fallback},
		{"relative/dir", fallback},
	} {
		t.Setenv("STATE_DIRECTORY", tc.env)
		if got := DefaultDataDir(); got != tc.want {
			t.Errorf("STATE_DIRECTORY=%q: DefaultDataDir() = %q, want %q", tc.env, got, tc.want)
		}
		c := DefaultConfig()
		if err := c.Finish(); err != nil {
			t.Fatalf("STATE_DIRECTORY=%q: Finish: %v", tc.env, err)
		}
		if c.DataDir != tc.want {
			t.Errorf("STATE_DIRECTORY=%q: data_dir = %q, want %q", tc.env, c.DataDir, tc.want)
		}
	}
}
