package main

import (
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpand(t *testing.T) {
	set := map[string]string{"mac": "02:5c:00:00:00:01", "serial": "A B/&c", "uuid": "0011-22"}
	tests := []struct{ in, want string }{
		{"mac=${mac}", "mac=02:5c:00:00:00:01"},
		{"${net0/mac}", "02:5c:00:00:00:01"},
		{"s=${serial:uristring}", "s=A%20B%2F%26c"},
		{"${mac:hexhyp}", "02-5c-00-00-00-01"},
		{"${mac:hexraw}", "025c00000001"},
		{"x${unset}y", "xy"},
		{"${asset:uristring}", ""},
		{"open ${mac", "open ${mac"},
	}
	for _, tc := range tests {
		if got := expand(tc.in, set); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The bootstrap siteboot serves, as its golden file has it: the chain is
// found and iPXE's variables filled in.
func TestParseSitebootScripts(t *testing.T) {
	boot, err := os.ReadFile("../../ipxe/testdata/bootstrap.ipxe")
	if err != nil {
		t.Fatal(err)
	}
	ramdisk, err := os.ReadFile("../../ipxe/testdata/ramdisk.ipxe")
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := os.ReadFile("../../ipxe/testdata/unknown.ipxe")
	if err != nil {
		t.Fatal(err)
	}
	m := newMachine(3, []byte{2, 0x5c, 0, 0, 0, 3}, true, false, 1, netip.Addr{})
	base, _ := url.Parse("http://10.0.0.2:8080/boot.ipxe")
	tests := []struct {
		name string
		body string
		want script
	}{
		{name: "bootstrap", body: string(boot), want: script{Chain: "http://10.0.0.2:8080/ipxe?mac=02:5c:00:00:00:03&uuid=" + m.uuidString() +
			"&buildarch=i386&platform=pcbios&serial=STORM-00003&asset="}},
		{name: "ramdisk", body: string(ramdisk), want: script{Chain: "http://10.0.0.2:8080/boot.ipxe",
			Kernel:  "http://images.example.net/agent/vmlinuz",
			Initrds: []string{"http://10.0.0.2:8080/cache/1111111111111111111111111111111111111111111111111111111111111111"}}},
		{name: "unknown machine", body: string(unknown), want: script{Chain: "http://10.0.0.2:8080/boot.ipxe"}},
		{name: "relative URIs and short options", body: "#!ipxe\nkernel -n k vmlinuz a=b\ninitrd --name=i initrd.img\nmodule /extra.cpio\n",
			want: script{Kernel: "http://10.0.0.2:8080/vmlinuz", Initrds: []string{"http://10.0.0.2:8080/initrd.img", "http://10.0.0.2:8080/extra.cpio"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseScript(tc.body, base, m.settings())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"<html>503</html>", "", "#!ipxe\nkernel tftp://x/vmlinuz\n"} {
		if _, err := parseScript(bad, base, m.settings()); err == nil {
			t.Errorf("parseScript(%q) accepted", bad)
		}
	}
}

func TestMachineIdentity(t *testing.T) {
	m := newMachine(1, []byte{2, 0x5c, 0, 0, 0, 1}, false, false, 7, netip.Addr{})
	again := newMachine(1, []byte{2, 0x5c, 0, 0, 0, 1}, false, false, 7, netip.Addr{})
	other := newMachine(2, []byte{2, 0x5c, 0, 0, 0, 2}, false, false, 7, netip.Addr{})
	if m.UUID != again.UUID || m.UUID == other.UUID {
		t.Errorf("UUIDs: %s, again %s, other machine %s", m.uuidString(), again.uuidString(), other.uuidString())
	}
	// Option 97 carries the first three fields little-endian; siteboot's
	// dhcpproxy swaps them back, so what it reads is ${uuid}.
	w, s := m.uuidWire(), m.uuidString()
	swapped := []byte{w[3], w[2], w[1], w[0], w[5], w[4], w[7], w[6]}
	if got := strings.ReplaceAll(s, "-", "")[:16]; got != hexString(swapped) {
		t.Errorf("wire %x does not swap back to %s", w, s)
	}
	if s[14] != '4' {
		t.Errorf("UUID %s is not version 4", s)
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	return sb.String()
}

func TestParseSrcIPs(t *testing.T) {
	got, err := parseSrcIPs("10.0.0.1-10.0.0.3, 192.168.1.0/30,172.16.0.9")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "192.168.1.1", "192.168.1.2", "172.16.0.9"}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"10.0.0.5-10.0.0.1", "::1", "10.0.0.0/33", "10.0.0.0/8", "x"} {
		if _, err := parseSrcIPs(bad); err == nil {
			t.Errorf("parseSrcIPs(%q) accepted", bad)
		}
	}
}

func TestBIOSFraction(t *testing.T) {
	for _, tc := range []struct {
		n    int
		frac float64
		want int
	}{{10, 0.5, 5}, {10, 0, 0}, {10, 1, 10}, {1000, 0.3, 300}, {7, 0.5, 3}} {
		o := options{N: tc.n, BIOS: tc.frac, MACPrefix: "02:5c"}
		ms, err := o.machines()
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, m := range ms {
			if m.BIOS {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("n %d bios %v: %d BIOS machines, want %d", tc.n, tc.frac, got, tc.want)
		}
	}
}
