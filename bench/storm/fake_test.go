package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// fakeSite is a boot server on loopback, written for these tests so that
// each step can be made to fail: a proxyDHCP that answers on the port it
// was asked on, its "port 4011" (an ephemeral port: -pxe-port) that
// answers requests after offers without a boot file, as dnsmasq does, a
// lock-step TFTP server and an HTTP server with /boot.ipxe, /ipxe, a
// kernel and an initrd.
type fakeSite struct {
	faults faults

	dhcp   net.PacketConn
	pxe    net.PacketConn // the "4011" port
	tftp   net.PacketConn
	http   *httptest.Server
	wg     sync.WaitGroup
	files  map[string][]byte
	kernel []byte
	initrd []byte

	mu         sync.Mutex
	discovers  map[string][]discoverSeen // by MAC
	requests   map[string][]requestSeen  // by MAC, at the "4011" port
	tftpSrcs   map[string]int            // transfer source IPs
	rrqOpts    map[string][]string       // by file: each request's options, "name=value" in order
	windowACKs int                       // ACKs windowed transfers received, ACK 0 included
	ipxeQuery  []string                  // /ipxe query strings
	ackDropped int
}

type discoverSeen struct {
	Class, UserClass string
	Arch             uint16
	UUID             []byte
	XID              uint32
}

// requestSeen is a DHCPREQUEST at the "4011" port.
type requestSeen struct {
	discoverSeen
	From, Ciaddr string // the source address and ciaddr
	FromPort     int
	ServerID     string // option 54
	Vendor       []byte // option 43
	Broadcast    bool
}

// faults make the fake site misbehave.
type faults struct {
	DropDiscovers   int  // ignore the first n DISCOVERs of every MAC
	DropACKsAfter   int  // ignore every ACK of a block >= this (0: none)
	DropFirstACK    bool // ignore the first ACK 1 of each transfer once
	WrongTSize      bool // announce one byte more than the file has
	NoKernelLine    bool // /ipxe answers a script without kernel (as for an unknown machine)
	ShortInitrd     bool // the initrd's body ends before its Content-Length
	NoIPXEOffer     bool // iPXE's DISCOVERs get no answer
	WantSrcPrefix   string
	RequireIPXEVars bool // /ipxe refuses a query without mac, uuid, buildarch, platform
	// Dnsmasq makes the firmware offers name no file, as dnsmasq's with
	// one pxe-service per architecture: BIOS a menu item (type 0x8000)
	// and its boot server, UEFI a next server and nothing else. The
	// "4011" port names the file. Without it the offers are siteboot's:
	// the file and discovery control 8.
	Dnsmasq bool
	// IPXEProxy makes iPXE's offer name neither next server nor file, so
	// that iPXE asks the "4011" port, which names the script.
	IPXEProxy bool
	// IPXEAckNoSiaddr: that answer names the script but no next server,
	// as dnsmasq's to a dhcp-boot without a server address.
	IPXEAckNoSiaddr bool
	// IPXEMenu makes iPXE's offer a PXE menu (type 0x8000 at the "4011"
	// port), as dnsmasq's with a pxe-service for iPXE's tag: BIOS iPXE
	// asks for the item, EFI iPXE cannot.
	IPXEMenu     bool
	NoItemEcho   bool // the "4011" port's ACKs leave out sub-option 71
	DropRequests int  // ignore the first n requests of every MAC at the "4011" port
	NoACK        bool // the "4011" port answers nothing
	// Window grants a windowsize (RFC 7440) up to this to a request that
	// asks for one; LoseBlock drops DATA block n of each windowed
	// transfer the first time it is sent.
	Window    int
	LoseBlock int
}

func startFakeSite(t *testing.T, f faults) *fakeSite {
	t.Helper()
	s := &fakeSite{faults: f, discovers: map[string][]discoverSeen{}, requests: map[string][]requestSeen{}, tftpSrcs: map[string]int{}, rrqOpts: map[string][]string{},
		files:  map[string][]byte{"undionly.kpxe": blob(70_000+3, 1), "ipxe.efi": blob(1468*3, 2)},
		kernel: blob(300_000, 3), initrd: blob(1_000_000, 4)}
	var err error
	if s.dhcp, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if s.pxe, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if s.tftp, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.http = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.wg.Go(s.serveDHCP)
	s.wg.Go(s.servePXE)
	s.wg.Go(s.serveTFTP)
	t.Cleanup(func() {
		s.http.Close()
		s.dhcp.Close()
		s.pxe.Close()
		s.tftp.Close()
		s.wg.Wait()
	})
	return s
}

func blob(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func (s *fakeSite) base() string { return s.http.URL }

func (s *fakeSite) serveDHCP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.dhcp.ReadFrom(buf)
		if err != nil {
			return
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || req.MessageType() != dhcpv4.MessageTypeDiscover {
			continue
		}
		seen := seenOf(req)
		mac := req.ClientHWAddr.String()
		s.mu.Lock()
		s.discovers[mac] = append(s.discovers[mac], seen)
		count := len(s.discovers[mac])
		s.mu.Unlock()
		ipxe := seen.UserClass == "iPXE"
		if count <= s.faults.DropDiscovers || (ipxe && s.faults.NoIPXEOffer) {
			continue
		}
		class, file := "PXEClient", s.fileFor(seen)
		siaddr := net.IPv4(127, 0, 0, 1)
		vendor := []byte{6, 1, 8, 255} // siteboot's: boot this file, no discovery
		switch {
		case strings.HasPrefix(seen.Class, "HTTPClient"):
			class, vendor = "HTTPClient", nil
		case ipxe && s.faults.IPXEProxy:
			file, siaddr, vendor = "", net.IPv4zero, nil
		case ipxe && s.faults.IPXEMenu, !ipxe && s.faults.Dnsmasq && seen.Arch == 0:
			// dnsmasq's: discovery control 3, prompt, boot servers and
			// menu, no next server.
			file, siaddr = "", net.IPv4zero
			vendor = []byte{6, 1, 3, 10, 4, 0, 'P', 'X', 'E', 8, 7, 0x80, 0, 1, 127, 0, 0, 1, 9, 7, 0x80, 0, 4, 'b', 'o', 'o', 't', 255}
		case !ipxe && s.faults.Dnsmasq:
			file, vendor = "", nil
		}
		mods := []dhcpv4.Modifier{
			dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
			dhcpv4.WithServerIP(siaddr),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier(class)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(127, 0, 0, 1))),
		}
		if file != "" {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptBootFileName(file)))
		}
		if vendor != nil {
			mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, vendor))
		}
		rep, err := dhcpv4.NewReplyFromRequest(req, mods...)
		if err != nil {
			continue
		}
		_, _ = s.dhcp.WriteTo(rep.ToBytes(), from)
	}
}

// fileFor is the boot file a machine gets, as siteboot names it.
func (s *fakeSite) fileFor(seen discoverSeen) string {
	switch {
	case seen.UserClass == "iPXE":
		return s.base() + "/boot.ipxe"
	case strings.HasPrefix(seen.Class, "HTTPClient"):
		return s.base() + "/boot/ipxe.efi"
	case seen.Arch == 0:
		return "undionly.kpxe"
	}
	return "ipxe.efi"
}

func seenOf(req *dhcpv4.DHCPv4) discoverSeen {
	seen := discoverSeen{Class: req.ClassIdentifier(), UserClass: string(req.Options.Get(dhcpv4.OptionUserClassInformation)),
		UUID: req.Options.Get(dhcpv4.OptionClientMachineIdentifier), XID: binary.BigEndian.Uint32(req.TransactionID[:])}
	if a := req.Options.Get(dhcpv4.OptionClientSystemArchitectureType); len(a) == 2 {
		seen.Arch = binary.BigEndian.Uint16(a)
	}
	return seen
}

func (s *fakeSite) pxePort() int { return s.pxe.LocalAddr().(*net.UDPAddr).Port }

// servePXE answers DHCPREQUESTs at the "4011" port with a DHCPACK that
// names the file, as dnsmasq does: a boot server request (option 43
// sub-option 71) gets that item's file with sub-option 71 echoed, any
// other the file for the machine's architecture. It answers to the
// request's source.
func (s *fakeSite) servePXE() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pxe.ReadFrom(buf)
		if err != nil {
			return
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || req.MessageType() != dhcpv4.MessageTypeRequest {
			continue
		}
		seen := requestSeen{discoverSeen: seenOf(req),
			From: from.(*net.UDPAddr).IP.String(), FromPort: from.(*net.UDPAddr).Port, Ciaddr: req.ClientIPAddr.String(),
			Vendor: req.Options.Get(dhcpv4.OptionVendorSpecificInformation), Broadcast: req.IsBroadcast()}
		if sid := req.ServerIdentifier(); sid != nil {
			seen.ServerID = sid.String()
		}
		mac := req.ClientHWAddr.String()
		s.mu.Lock()
		s.requests[mac] = append(s.requests[mac], seen)
		count := len(s.requests[mac])
		s.mu.Unlock()
		if count <= s.faults.DropRequests || s.faults.NoACK {
			continue
		}
		ipxe := seen.UserClass == "iPXE"
		siaddr := net.IPv4(127, 0, 0, 1)
		if ipxe && s.faults.IPXEAckNoSiaddr {
			siaddr = net.IPv4zero
		}
		mods := []dhcpv4.Modifier{
			dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
			dhcpv4.WithServerIP(siaddr),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(127, 0, 0, 1))),
			dhcpv4.WithOption(dhcpv4.OptBootFileName(s.fileFor(seen.discoverSeen))),
		}
		if len(seen.Vendor) > 0 && !s.faults.NoItemEcho {
			mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, seen.Vendor))
		}
		rep, err := dhcpv4.NewReplyFromRequest(req, mods...)
		if err != nil {
			continue
		}
		_, _ = s.pxe.WriteTo(rep.ToBytes(), from)
	}
}

func (s *fakeSite) tftpPort() int { return s.tftp.LocalAddr().(*net.UDPAddr).Port }

func (s *fakeSite) serveTFTP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.tftp.ReadFrom(buf)
		if err != nil {
			return
		}
		if n < 4 || binary.BigEndian.Uint16(buf) != opRRQ {
			continue
		}
		fields := bytes.Split(buf[2:n-1], []byte{0})
		opts := map[string]string{}
		var seen []string
		for i := 2; i+1 < len(fields); i += 2 {
			opts[string(fields[i])] = string(fields[i+1])
			seen = append(seen, string(fields[i])+"="+string(fields[i+1]))
		}
		s.mu.Lock()
		s.tftpSrcs[from.(*net.UDPAddr).IP.String()]++
		s.rrqOpts[string(fields[0])] = append(s.rrqOpts[string(fields[0])], strings.Join(seen, " "))
		s.mu.Unlock()
		name := string(fields[0]) // before buf is read into again
		s.wg.Go(func() { s.transfer(name, opts, from.(*net.UDPAddr)) })
	}
}

// transfer sends one file lock-step from its own port, retransmitting
// each packet every 50 ms up to 5 times, as a TFTP server does.
func (s *fakeSite) transfer(name string, opts map[string]string, to *net.UDPAddr) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return
	}
	defer conn.Close()
	data, ok := s.files[name]
	if !ok {
		_, _ = conn.WriteToUDP(buildError(1, "file not found"), to)
		return
	}
	blk := 512
	if v, err := strconv.Atoi(opts["blksize"]); err == nil && v >= 512 {
		blk = min(v, 1468)
	}
	tsize := len(data)
	if s.faults.WrongTSize {
		tsize++
	}
	if w, err := strconv.Atoi(opts["windowsize"]); err == nil && w >= 1 && s.faults.Window > 0 {
		s.transferWindowed(conn, to, data, blk, min(w, s.faults.Window), opts)
		return
	}
	oack := []byte{0, opOACK}
	oack = append(oack, fmt.Sprintf("blksize\x00%d\x00tsize\x00%d\x00", blk, tsize)...)
	pkt, want := oack, uint16(0)
	droppedFirst := false
	rbuf := make([]byte, 1500)
	for block := 0; ; {
		acked := false
		for try := 0; try < 5 && !acked; try++ {
			_, _ = conn.WriteToUDP(pkt, to)
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			for {
				n, _, err := conn.ReadFromUDP(rbuf)
				if err != nil {
					break
				}
				if n < 4 {
					continue
				}
				op, num := binary.BigEndian.Uint16(rbuf), binary.BigEndian.Uint16(rbuf[2:])
				if op == opERROR {
					return // the client's tsize probe ends here
				}
				if op != opACK || num != want {
					continue
				}
				if s.faults.DropACKsAfter > 0 && int(num) >= s.faults.DropACKsAfter ||
					s.faults.DropFirstACK && num == 1 && !droppedFirst {
					droppedFirst = true
					s.mu.Lock()
					s.ackDropped++
					s.mu.Unlock()
					continue
				}
				acked = true
				break
			}
		}
		if !acked {
			return
		}
		off := block * blk
		if off > len(data) {
			return // the last, short block was acknowledged
		}
		block++
		end := min(off+blk, len(data))
		pkt = append([]byte{0, opDATA, byte(block >> 8), byte(block)}, data[off:end]...)
		want = uint16(block)
	}
}

// transferWindowed sends data w blocks at a time (RFC 7440): the OACK,
// then windows from the block after the last one acknowledged, the window
// sent again after 50 ms without progress, up to 5 times.
func (s *fakeSite) transferWindowed(conn *net.UDPConn, to *net.UDPAddr, data []byte, blk, w int, opts map[string]string) {
	oack := []byte{0, opOACK}
	if _, ok := opts["tsize"]; ok {
		oack = append(oack, fmt.Sprintf("tsize\x00%d\x00", len(data))...)
	}
	oack = append(oack, fmt.Sprintf("blksize\x00%d\x00windowsize\x00%d\x00", blk, w)...)
	blocks := len(data)/blk + 1 // the last one short, maybe empty
	rbuf := make([]byte, 1500)
	// await reads ACKs until one of acked or a later block (returned) or
	// 50 ms of nothing (-1); an ERROR (the tsize probe's end) is -2.
	await := func(acked int) int {
		_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		for {
			n, _, err := conn.ReadFromUDP(rbuf)
			if err != nil {
				return -1
			}
			if n < 4 {
				continue
			}
			op, num := binary.BigEndian.Uint16(rbuf), int(binary.BigEndian.Uint16(rbuf[2:]))
			if op == opERROR {
				return -2
			}
			if op == opACK {
				s.mu.Lock()
				s.windowACKs++
				s.mu.Unlock()
				if num >= acked && num <= blocks {
					return num
				}
			}
		}
	}
	acked := -1
	for try := 0; try < 5 && acked < 0; try++ {
		_, _ = conn.WriteToUDP(oack, to)
		if acked = await(0); acked == -2 {
			return
		}
	}
	if acked < 0 {
		return
	}
	// An ACK of the block acknowledged last says the client missed the
	// next one: the window starts again at once; an ACK of a later block
	// moves it on.
	lost := false
	for tries := 0; acked < blocks && tries < 5; tries++ {
		for b := acked + 1; b <= min(acked+w, blocks); b++ {
			if b == s.faults.LoseBlock && !lost {
				lost = true
				continue
			}
			off := (b - 1) * blk
			_, _ = conn.WriteToUDP(append([]byte{0, opDATA, byte(b >> 8), byte(b)}, data[off:min(off+blk, len(data))]...), to)
		}
		got := await(acked)
		if got == -2 {
			return
		}
		if got > acked {
			acked, tries = got, -1
		}
	}
}

func (s *fakeSite) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/boot.ipxe":
		// siteboot's bootstrap, as ipxe/testdata/bootstrap.ipxe has it.
		fmt.Fprintf(w, "#!ipxe\n# bootstrap\nset siteboot_tries:int32 0\nisset ${ip} && goto script ||\n:dhcp\ndhcp && goto script ||\n:script\n"+
			"chain --autofree --replace %s/ipxe?mac=${mac}&uuid=${uuid}&buildarch=${buildarch}&platform=${platform}&serial=${serial:uristring}&asset=${asset:uristring} ||\nsleep 30\ngoto dhcp\n", s.base())
	case r.URL.Path == "/ipxe":
		q := r.URL.Query()
		s.mu.Lock()
		s.ipxeQuery = append(s.ipxeQuery, r.URL.RawQuery)
		s.mu.Unlock()
		if s.faults.RequireIPXEVars && (q.Get("mac") == "" || q.Get("uuid") == "" || q.Get("buildarch") == "" || q.Get("platform") == "") {
			http.Error(w, "missing iPXE variables", http.StatusBadRequest)
			return
		}
		if s.faults.NoKernelLine {
			fmt.Fprintf(w, "#!ipxe\necho siteboot: machine %s is not registered at this site\nsleep 30\nchain --autofree --replace %s/boot.ipxe\n", q.Get("mac"), s.base())
			return
		}
		fmt.Fprintf(w, "#!ipxe\nkernel --name kernel %s/k/vmlinuz initrd=initrd quiet bc.mac=%s || goto failed\ninitrd --name initrd /k/initrd || goto failed\nboot ||\n:failed\nchain --autofree --replace %s/boot.ipxe\n",
			s.base(), q.Get("mac"), s.base())
	case r.URL.Path == "/boot/ipxe.efi":
		writeSized(w, s.files["ipxe.efi"])
	case r.URL.Path == "/k/vmlinuz":
		writeSized(w, s.kernel)
	case r.URL.Path == "/k/initrd":
		w.Header().Set("Content-Length", strconv.Itoa(len(s.initrd)))
		if s.faults.ShortInitrd {
			_, _ = w.Write(s.initrd[:len(s.initrd)/2])
			return
		}
		_, _ = w.Write(s.initrd)
	default:
		http.NotFound(w, r)
	}
}

// options for a storm against this site.
func (s *fakeSite) options(n int) options {
	o, err := parseFlags([]string{"-n", strconv.Itoa(n), "-window", "200ms", "-dhcp-server", s.dhcp.LocalAddr().String(),
		"-dhcp-listen", "0.0.0.0:0", "-pxe-listen", "0.0.0.0:0", "-pxe-port", strconv.Itoa(s.pxePort()),
		"-tftp-port", strconv.Itoa(s.tftpPort()), "-timescale", "0.02",
		"-machine-timeout", "20s", "-timeout", "60s"}, new(bytes.Buffer))
	if err != nil {
		panic(err)
	}
	return o
}

// writeSized answers b with its Content-Length, as file servers do (a
// large write without it would go out chunked).
func writeSized(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
