package e2e

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// journalOf keeps what journald forwarded to the console for siteboot,
// with or without journald's time stamp, and nothing else.
func TestJournalOf(t *testing.T) {
	console := "[   10.1] systemd[1]: Starting siteboot.service...\r\n" +
		"[   11.234567] siteboot[412]: {\"msg\":\"siteboot ready\"}\r\n" +
		"siteboot[412]: {\"msg\":\"ipxe: script served\"}\n" +
		"appliance: config drive /dev/sr0 mounted read-only\n" +
		"siteboot-appliance[300]: not ours\n" +
		"[   12.0] siteboot[x]: not a pid\n" +
		"Debian GNU/Linux 12 siteboot-e2e ttyS0\n"
	want := "{\"msg\":\"siteboot ready\"}\n{\"msg\":\"ipxe: script served\"}\n"
	if diff := cmp.Diff(want, journalOf(console, "siteboot")); diff != "" {
		t.Errorf("journalOf (-want +got):\n%s", diff)
	}
	if got := parseLog(journalOf(console, "siteboot")); len(got) != 2 || got[1].str("msg") != msgScript {
		t.Errorf("parseLog(journalOf) = %v; want the two JSON lines", got)
	}
}
