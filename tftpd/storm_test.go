package tftpd

import "testing"

// TestRepeatedFetchOneLine: a machine that fetches its first stage again
// and again (firmware retrying, or a stranger on its address) writes one
// Info line for it; the rest are counted as suppressed, and a missing file
// still gets its own line.
func TestRepeatedFetchOneLine(t *testing.T) {
	fx := start(t, Config{})
	const n = 10
	for range n {
		if _, err := pinGet(fx.addr, "undionly.kpxe", 1468, true); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, fx, `siteboot_tftp_transfers_total{result="ok"}`, n+1) // with start's warm-up
	if _, err := pinGet(fx.addr, "missing.efi", 1468, true); err == nil {
		t.Fatal("a missing file was served")
	}
	waitMetric(t, fx, `siteboot_tftp_log_lines_suppressed_total`, n-1)
	if got := fx.logs.lines("level=INFO", "tftp transfer", "file=undionly.kpxe"); len(got) != 1 {
		t.Errorf("%d fetches of one file wrote %d Info lines, want 1:\n%q", n, len(got), got)
	}
	if got := fx.logs.wait("level=INFO", "tftp transfer", "result=not_found"); len(got) != 1 {
		t.Errorf("the missing file wrote %d Info lines, want 1", len(got))
	}
	// The last repeat's line may come after its counters moved.
	if got := fx.logs.waitCount(n-1, "level=DEBUG", "tftp transfer", "result=ok"); len(got) != n-1 {
		t.Errorf("%d Debug lines for the repeats, want %d", len(got), n-1)
	}
}
