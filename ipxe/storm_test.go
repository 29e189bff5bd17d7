package ipxe

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siteboot/siteboot/internal/metrictest"
)

// TestStormOneLinePerStage: a machine that fetches /boot.ipxe and its
// /ipxe script 50 times each (iPXE's retries, or a stranger repeating
// them) writes one Info line per stage; the rest are at Debug and counted.
func TestStormOneLinePerStage(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	const n = 50
	for range n {
		get(t, ts.URL+"/boot.ipxe", "")
		get(t, ts.URL+"/ipxe?mac="+macChain, "")
	}
	logs := f.logs.String()
	if got := strings.Count(logs, "level=INFO"); got != 2 {
		t.Errorf("%d requests wrote %d Info lines, want 2 (bootstrap, script):\n%s", 2*n, got, logs)
	}
	if got := strings.Count(logs, "level=DEBUG"); got != 2*n-2 {
		t.Errorf("%d Debug lines, want every other request's (%d)", got, 2*n-2)
	}
	v := metrictest.Values(t, f.reg)
	for _, st := range []string{stageBootstrap, stageScript} {
		if got := v[`siteboot_ipxe_log_lines_suppressed_total{stage="`+st+`"}`]; got != n-1 {
			t.Errorf("suppressed{stage=%q} = %v, want %d", st, got, n-1)
		}
	}
}
