package ipxe

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/siteboot/siteboot/bootentry"
)

// scriptShapes are the line counts of each kind of script, keyed by a line
// only that kind has.
var scriptShapes = []struct {
	marker string
	lines  int
}{
	{"# siteboot bootstrap:", 16},
	{"# siteboot: ramdisk boot of ", 9},
	{"# siteboot: sanboot of cached image ", 6},
	{"# siteboot: this machine's script is its entry's ipxe_script_url", 6},
	{" is not registered at this site", 5},
}

var macLine = regexp.MustCompile(`^echo siteboot: machine ([0-9a-f]{2}(:[0-9a-f]{2}){5}) is not registered at this site$`)

// FuzzQuery sends any query string and Host header to /ipxe (the base URL
// comes from the arrival address, 10.0.0.2:8080, whatever Host says). It
// never panics or fails with a 5xx, never serves an entry's script for a
// MAC that has no entry, never puts the Host header into a script, and no
// input adds a line, a control character or a ${…} expansion to a script.
func FuzzQuery(f *testing.F) {
	for _, s := range []struct{ q, host string }{
		{"mac=" + macRamdisk + "&uuid=" + uuidRamdisk + "&buildarch=x86_64&platform=efi&serial=SN%201&asset=", "10.0.0.2:8080"},
		{"mac=" + macSanboot, "10.0.0.2"},
		{"mac=" + macChain + "&buildarch=arm64&platform=efi", "[fd00::2]:80"},
		{"mac=" + macUnknown, "boot.example.net"},
		{"mac=52-54-00-00-00-01%0Akernel", "10.0.0.2"},
		{"mac=52:54:00:00:00:01&mac=52:54:00:00:00:09", "10.0.0.2"},
		{"mac=5254.0000.0001&uuid=%24%7Bx%7D", "a b"},
	} {
		f.Add(s.q, s.host)
	}
	fx := newFixture(f, func(c *Config) {
		c.BaseURL, c.Signer, c.Metrics, c.Logger = "", goldenSigner{}, nil, slog.New(slog.DiscardHandler)
	})
	h := fx.srv.Handler()
	f.Fuzz(func(t *testing.T, query, host string) {
		arrival := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 8080}
		r := (&http.Request{
			Method: http.MethodGet, URL: &url.URL{Path: "/ipxe", RawQuery: query},
			Host: host, RemoteAddr: "192.0.2.10:40000", Header: http.Header{},
		}).WithContext(context.WithValue(context.Background(), http.LocalAddrContextKey, arrival))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			checkScript(t, query, w.Body.String())
			if strings.Count(w.Body.String(), "http://10.0.0.2:8080/") < 1 {
				t.Fatalf("script without the arrival address in its URLs:\n%s", w.Body)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("status %d for query %q host %q: %s", w.Code, query, host, w.Body)
		}
	})
}

func checkScript(t *testing.T, query, script string) {
	t.Helper()
	if !strings.HasPrefix(script, "#!ipxe\n") || !strings.HasSuffix(script, "\n") {
		t.Fatalf("not a script:\n%s", script)
	}
	lines := strings.Split(strings.TrimSuffix(script, "\n"), "\n")
	matched := false
	for _, shape := range scriptShapes {
		if strings.Contains(script, shape.marker) {
			matched = true
			if len(lines) != shape.lines {
				t.Fatalf("%d lines, want %d for this kind:\n%s", len(lines), shape.lines, script)
			}
		}
	}
	if !matched {
		t.Fatalf("script of no known kind:\n%s", script)
	}
	for _, l := range lines {
		for i := 0; i < len(l); i++ {
			if l[i] < 0x20 || l[i] == 0x7f {
				t.Fatalf("control character %q in line %q", l[i], l)
			}
		}
		if strings.Contains(l, "${") && !strings.Contains(l, "siteboot_tries") && !strings.Contains(l, "/ipxe?mac=${mac}") {
			t.Fatalf("expansion in line %q", l)
		}
	}
	// The MAC the client asked for, normalised independently of the handler.
	q, _ := url.ParseQuery(query)
	mac, err := bootentry.NormalizeMAC(q.Get("mac"))
	if err != nil {
		t.Fatalf("a script for an invalid mac %q:\n%s", q.Get("mac"), script)
	}
	owner := map[string]string{
		"# siteboot: ramdisk boot of " + macRamdisk:                        macRamdisk,
		"# siteboot: sanboot of cached image sha256:" + isoHex:             macSanboot,
		"# siteboot: this machine's script is its entry's ipxe_script_url": macChain,
	}
	// macRamdisk's entry pins uuidRamdisk: only a request carrying it gets
	// the entry's script, any other gets the unknown-machine one.
	uuid, _ := bootentry.NormalizeUUID(q.Get("uuid"))
	pinMatched := mac == macRamdisk && uuid == uuidRamdisk
	if want, ok := owner[lines[1]]; ok {
		if mac != want || (mac == macRamdisk && !pinMatched) {
			t.Fatalf("the script of %s's entry served for %s (uuid %q):\n%s", want, mac, q.Get("uuid"), script)
		}
		return
	}
	m := macLine.FindStringSubmatch(lines[1])
	if m == nil || m[1] != mac || pinMatched || mac == macSanboot || mac == macChain {
		t.Fatalf("unexpected script for %s:\n%s", mac, script)
	}
}
