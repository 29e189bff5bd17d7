package main

import (
	"net/netip"
	"net/url"
	"os"
	"testing"
)

// FuzzParseScript: whatever a server answers, the script parser returns
// without panicking and only ever absolute http(s) URLs to fetch.
func FuzzParseScript(f *testing.F) {
	for _, name := range []string{"bootstrap", "ramdisk", "chain", "unknown", "sanboot"} {
		if b, err := os.ReadFile("../../ipxe/testdata/" + name + ".ipxe"); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("#!ipxe\nkernel -n k vmlinuz ${mac:hexhyp}\ninitrd ${x\nmodule //h/${serial:uristring}\n")
	m := newMachine(1, []byte{2, 0x5c, 0, 0, 0, 1}, false, false, 1, netip.Addr{})
	base, _ := url.Parse("http://10.0.0.2:8080/boot.ipxe")
	f.Fuzz(func(t *testing.T, body string) {
		s, err := parseScript(body, base, m.settings())
		if err != nil {
			return
		}
		for _, u := range append([]string{s.Chain, s.Kernel}, s.Initrds...) {
			if u != "" && !isHTTPURL(u) {
				t.Fatalf("parseScript(%q) gave %q, not an absolute http(s) URL", body, u)
			}
		}
	})
}

// FuzzReadOACK: a server's OACK never panics the reader, and what it
// accepts is a blksize no larger than asked and a non-negative tsize.
func FuzzReadOACK(f *testing.F) {
	f.Add([]byte("blksize\x001468\x00tsize\x0070000\x00"))
	f.Add([]byte("tsize\x00-1\x00"))
	f.Add([]byte("blksize\x00"))
	f.Fuzz(func(t *testing.T, opts []byte) {
		res := tftpResult{TSize: -1, BlkSize: 512}
		if err := readOACK(opts, &res, 1468, 4); err != nil {
			return
		}
		if res.BlkSize < 8 || res.BlkSize > 1468 || res.TSize < -1 {
			t.Fatalf("readOACK(%q) = %+v", opts, res)
		}
	})
}
