package packaging

import (
	"os/exec"
	"strings"
	"testing"
)

func debVersion(t *testing.T, describe string) (string, error) {
	t.Helper()
	out, err := exec.Command("./deb/version", describe, "20261202034500").CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// git describe becomes a Debian version that dpkg sorts in build order.
func TestDebVersion(t *testing.T) {
	for _, tc := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.abc1234"},
		{"v1.2.3-rc1-4-gabc1234-dirty", "1.2.3~rc1+git4.abc1234+dirty"},
		{"abc1234", "0.0.0~git20261202034500.abc1234"},
		{"79c12cd-dirty", "0.0.0~git20261202034500.79c12cd+dirty"},
	} {
		got, err := debVersion(t, tc.describe)
		if err != nil || got != tc.want {
			t.Errorf("deb/version %q = %q, %v; want %q", tc.describe, got, err, tc.want)
		}
	}
	for _, bad := range []string{"release one", "v1.2.3_final", "main"} {
		if got, err := debVersion(t, bad); err == nil {
			t.Errorf("deb/version %q = %q; want a refusal", bad, got)
		}
	}
}

// Each build in this list comes after the one before; dpkg must agree.
func TestDebVersionOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		skipOrFail(t, "dpkg is not installed")
	}
	builds := []string{
		"0.0.0~git20261201000000.abc1234", "0.0.0~git20261202000000.0123456",
		"1.0.0~rc1", "1.0.0~rc1+git1.abc1234", "1.0.0", "1.0.0+git3.abc1234", "1.0.0+git3.abc1234+dirty", "1.0.1",
	}
	for i := 1; i < len(builds); i++ {
		if err := exec.Command("dpkg", "--compare-versions", builds[i-1], "lt", builds[i]).Run(); err != nil {
			t.Errorf("dpkg does not sort %s before %s", builds[i-1], builds[i])
		}
	}
}
