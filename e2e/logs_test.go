package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// logLine is one JSON line of siteboot's log (log.format: json).
type logLine map[string]any

// str returns field k as a string ("" when absent); numbers are printed.
func (l logLine) str(k string) string {
	switch v := l[k].(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(v)
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

// at is the line's time stamp.
func (l logLine) at() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, l.str("time"))
	return t
}

// matches reports whether every key has the given value.
func (l logLine) matches(kv map[string]string) bool {
	for k, v := range kv {
		if l.str(k) != v {
			return false
		}
	}
	return true
}

// compact renders the fields a reader of a failed test needs.
func (l logLine) compact() string {
	var b strings.Builder
	b.WriteString(l.at().Format("15:04:05.000") + " " + l.str("msg"))
	for _, k := range []string{"decision", "result", "mac", "remote", "file", "path", "method", "code", "buildarch", "platform", "giaddr", "to", "err"} {
		if v := l.str(k); v != "" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	return b.String()
}

// parseLog returns the JSON lines of text; other lines are skipped.
func parseLog(text string) []logLine {
	var out []logLine
	for _, raw := range strings.Split(text, "\n") {
		if !strings.HasPrefix(raw, "{") {
			continue
		}
		var l logLine
		if json.Unmarshal([]byte(raw), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// filterLog returns the lines whose msg is msg and whose fields match kv.
func filterLog(lines []logLine, msg string, kv map[string]string) []logLine {
	var out []logLine
	for _, l := range lines {
		if l.str("msg") == msg && l.matches(kv) {
			out = append(out, l)
		}
	}
	return out
}

// Messages siteboot logs once per decision (see dhcpproxy, ipxe, tftpd,
// imagecache).
const (
	msgDHCP      = "dhcpproxy: decision"
	msgBootstrap = "ipxe: bootstrap served"
	msgScript    = "ipxe: script served"
	msgUnknown   = "ipxe: no live entry; told the machine so and recorded it"
	msgTFTP      = "tftp transfer"
	msgCache     = "imagecache: served"
	msgReady     = "siteboot ready"
)
