package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/siteboot/siteboot/bench/internal/pxe"
)

// The steps of a boot, in order.
const (
	stepPXEDHCP    = "pxe-dhcp"
	stepFirstStage = "first-stage"
	stepIPXEDHCP   = "ipxe-dhcp"
	stepScript     = "script"
	stepKernel     = "kernel"
	stepInitrd     = "initrd"
)

var stepOrder = []string{stepPXEDHCP, stepFirstStage, stepIPXEDHCP, stepScript, stepKernel, stepInitrd}

// maxChains bounds how many scripts one machine follows (boot.ipxe, its
// chain, and what that chains) before it must reach a kernel line.
const maxChains = 4

var (
	errBadOffer       = errors.New("unusable offer")
	errBadAck         = errors.New("unusable ACK")
	errNoKernel       = errors.New("no kernel line")
	errNoInitrd       = errors.New("no initrd line")
	errChainLoop      = errors.New("chain loop")
	errTooDeep        = errors.New("too many chained scripts")
	errNotIPXE        = errors.New("not an iPXE script")
	errRunTimeout     = errors.New("run timeout")
	errMachineTimeout = errors.New("machine timeout")
)

// MachineResult is one machine's boot.
type MachineResult struct {
	Index      int                `json:"index"`
	MAC        string             `json:"mac"`
	UUID       string             `json:"uuid"`
	Kind       string             `json:"kind"` // bios, uefi, uefi-http
	Src        string             `json:"src,omitempty"`
	StartS     float64            `json:"start_s"` // since the run's start
	TotalS     float64            `json:"total_s"` // start to initrd complete (or to the failure)
	Done       bool               `json:"done"`
	Steps      map[string]float64 `json:"steps_s"` // each step reached, the failed one included
	FailedStep string             `json:"failed_step,omitempty"`
	Reason     string             `json:"reason,omitempty"`
	Error      string             `json:"error,omitempty"`
	BootFile   string             `json:"boot_file,omitempty"`
	// BootServer is the ip:port the firmware asked for its boot file when
	// the proxy offer did not give it (PXE 2.1 boot server discovery, or
	// edk2's request after an offer without discovery options).
	BootServer string `json:"boot_server,omitempty"`
	// IPXEServer is the ip:port iPXE asked after its offer: the proxy it
	// sent a ProxyDHCPREQUEST to (the offer had no PXE options), or the
	// boot server of the offer's PXE menu (BIOS iPXE's menu boot).
	IPXEServer string   `json:"ipxe_server,omitempty"`
	ScriptURL  string   `json:"script_url,omitempty"`
	Kernel     string   `json:"kernel,omitempty"`
	Initrds    []string `json:"initrds,omitempty"`
	Bytes      int64    `json:"bytes"` // first stage, kernel and initrds
	// Retransmits of DISCOVERs and of requests to port 4011 (both steps),
	// and of TFTP requests/ACKs.
	DHCPRetransmits int `json:"dhcp_retransmits"`
	TFTPRetransmits int `json:"tftp_retransmits"`
	// ProxyRequests counts the requests to port 4011 of both steps,
	// retransmits included.
	ProxyRequests int `json:"proxy_requests"`
}

// bootSpec is everything but the machine that a boot depends on.
type bootSpec struct {
	PXETimeouts     []time.Duration // firmware DISCOVERs
	IPXETimeouts    []time.Duration // iPXE DISCOVERs
	PXEReqTimeouts  []time.Duration // firmware requests to port 4011
	IPXEReqTimeouts []time.Duration // iPXE's ProxyDHCPREQUESTs
	IPXEBSTimeouts  []time.Duration // BIOS iPXE's boot server requests (PXE menu)
	PXEPort         int             // where those requests go (4011)
	TFTP            tftpSpec
	HTTP            httpSpec
	KernelSHA256    string
	InitrdSHA256    string
}

// booter runs one machine's boot, step by step.
type booter struct {
	spec   bootSpec
	mux    *dhcpMux
	m      machine
	xid    uint32 // firmware's; iPXE uses xid+1
	res    *MachineResult
	client *http.Client
	buf    []byte
	bulk   *bulkWorker // fetches the kernel and initrds; nil: this process
	// arrived is when the last DHCP answer the step took reached the
	// machine's socket (timed reads it).
	arrived time.Time
}

// fail records err as the failure of step.
func (b *booter) fail(step string, err error) {
	b.res.FailedStep, b.res.Reason, b.res.Error = step, classify(err), err.Error()
}

// timed runs one step and records its duration, also when it fails.
func (b *booter) timed(step string, fn func() error) bool {
	t0 := time.Now()
	b.arrived = time.Time{}
	err := fn()
	end := time.Now()
	if err == nil && !b.arrived.IsZero() && b.arrived.After(t0) && b.arrived.Before(end) {
		end = b.arrived // a DHCP step ends when its last answer arrived
	}
	b.res.Steps[step] = end.Sub(t0).Seconds()
	if err != nil {
		b.fail(step, err)
		return false
	}
	return true
}

// run boots the machine; ctx bounds the whole boot.
func (b *booter) run(ctx context.Context) {
	defer b.client.CloseIdleConnections()
	var offer pxe.Reply
	ok := b.timed(stepPXEDHCP, func() (err error) { offer, err = b.pxeDHCP(ctx); return err }) &&
		b.timed(stepFirstStage, func() error { return b.firstStage(ctx, offer) }) &&
		b.timed(stepIPXEDHCP, func() (err error) { b.res.ScriptURL, err = b.ipxeDHCP(ctx); return err })
	var sc script
	ok = ok && b.timed(stepScript, func() (err error) { sc, err = b.scripts(ctx, b.res.ScriptURL); return err })
	if ok && b.bulk != nil {
		b.res.Done = b.fetchByWorker(ctx, sc)
		return
	}
	ok = ok && b.timed(stepKernel, func() error { return b.download(ctx, sc.Kernel, b.spec.KernelSHA256) })
	ok = ok && b.timed(stepInitrd, func() error {
		for _, u := range sc.Initrds {
			if err := b.download(ctx, u, b.spec.InitrdSHA256); err != nil {
				return err
			}
		}
		return nil
	})
	b.res.Done = ok
}

// fetchByWorker has the bulk worker download the kernel and initrds and
// records its steps as timed would.
func (b *booter) fetchByWorker(ctx context.Context, sc script) bool {
	job := bulkJob{ID: b.res.Index, Kernel: sc.Kernel, Initrds: sc.Initrds}
	if b.m.Src.IsValid() {
		job.Src = b.m.Src.String()
	}
	r := b.bulk.fetch(ctx, job)
	b.res.Bytes += r.Bytes
	b.res.Steps[stepKernel] = r.KernelS
	if r.FailedStep != stepKernel {
		b.res.Steps[stepInitrd] = r.InitrdS
	}
	if r.FailedStep != "" {
		b.res.FailedStep, b.res.Reason, b.res.Error = r.FailedStep, r.Reason, r.Error
		return false
	}
	return true
}

func (b *booter) pxeDHCP(ctx context.Context) (pxe.Reply, error) {
	spec := pxe.DiscoverSpec{Arch: b.m.arch(), VendorClass: b.m.firmwareClass(), UUID: b.m.uuidWire()}
	pkt, err := pxe.BuildDiscover(b.m.MAC, spec)
	if err != nil {
		return pxe.Reply{}, err
	}
	pxe.SetXID(pkt, b.xid)
	accept := pxe.Reply.IsProxyOffer
	if b.m.HTTPBoot {
		accept = pxe.Reply.IsHTTPProxyOffer
	}
	rep, re, err := b.mux.exchange(ctx, dhcpTx{pkt: pkt, xid: b.xid, mac: [6]byte(b.m.MAC),
		timeouts: b.spec.PXETimeouts, accept: accept, what: "DISCOVERs", noReply: errNoOffer})
	b.res.DHCPRetransmits += re
	b.arrived = rep.Arrived
	if err != nil {
		return rep, err
	}
	ask, err := firmwareAsk(rep, b.m.HTTPBoot)
	if err != nil {
		return rep, err
	}
	if ask != nil {
		if rep, err = b.askBootServer(ctx, spec, *ask); err != nil {
			return rep, err
		}
	}
	b.res.BootFile = rep.BootFile
	return rep, nil
}

// bootAsk is the request firmware sends to a port 4011 for its boot file.
type bootAsk struct {
	server netip.Addr
	item   *pxe.BootItem // option 43 sub-option 71; nil: none
}

// firmwareAsk says what firmware does after offer, as edk2's PxeBcDxe
// does it (PXE 2.1 §2.2.5-2.2.6): nil when it boots the offer's file,
// else the request it sends to port 4011 for one. An HTTP boot offer is
// always booted as it is.
func firmwareAsk(offer pxe.Reply, httpBoot bool) (*bootAsk, error) {
	p := offer.PXE
	switch {
	case httpBoot && offer.BootFile == "":
		return nil, fmt.Errorf("%w: HTTP boot offer from %v names no boot file", errBadOffer, offer.ServerID)
	case httpBoot:
		return nil, nil
	case !p.Discovery:
		// A proxy offer without discovery options ("BINL", dnsmasq's to
		// UEFI): edk2 asks its server again at port 4011, whether or not
		// the offer names a file. Next server first, then option 54.
		server := firstAddr(offer.Siaddr, offer.ServerID)
		if !server.IsValid() {
			return nil, fmt.Errorf("%w: proxy offer has no PXE discovery options and names no server to ask (siaddr, option 54)", errBadOffer)
		}
		return &bootAsk{server: server}, nil
	case bootsMenu(offer):
		return menuAsk(offer)
	case offer.BootFile != "":
		return nil, nil
	}
	return nil, fmt.Errorf("%w: proxy offer from %v names no boot file and has no boot menu", errBadOffer, offer.ServerID)
}

// bootsMenu tells whether a client boots offer's PXE menu rather than its
// file: a menu, unless discovery control bit 3 says to boot a file the
// offer names (PXE 2.1 Table 2-1; edk2 and iPXE alike).
func bootsMenu(offer pxe.Reply) bool {
	return len(offer.PXE.Menu) > 0 && (offer.PXE.Control&pxe.CtlUseFile == 0 || offer.BootFile == "")
}

// menuAsk is boot server discovery for the default (first) item of
// offer's menu, as after a prompt's timeout, with layer 0, by unicast to
// the server sub-option 8 lists for its type. Without one a client would
// broadcast or multicast (when discovery control allows), which storm
// does not: it asks the proxy itself.
func menuAsk(offer pxe.Reply) (*bootAsk, error) {
	p := offer.PXE
	t := p.Menu[0].Type
	if t == 0 {
		return nil, fmt.Errorf("%w: the default item of the proxy offer's menu is a local boot (type 0)", errBadOffer)
	}
	server, ok := p.ServerFor(t)
	if !ok && p.Control&pxe.CtlServerList != 0 {
		return nil, fmt.Errorf("%w: no boot server for menu type %#04x and discovery control %#x allows only the listed ones", errBadOffer, t, p.Control)
	}
	if !ok {
		server = firstAddr(offer.ServerID, offer.Siaddr)
	}
	if !server.IsValid() {
		return nil, fmt.Errorf("%w: no boot server for menu type %#04x (sub-option 8, option 54 or siaddr)", errBadOffer, t)
	}
	return &bootAsk{server: server, item: &pxe.BootItem{Type: t}}, nil
}

// firstAddr returns the first of addrs that is a valid, specified address.
func firstAddr(addrs ...netip.Addr) netip.Addr {
	for _, a := range addrs {
		if a.IsValid() && !a.IsUnspecified() {
			return a
		}
	}
	return netip.Addr{}
}

// askBootServer sends ask as edk2 does: a DHCPREQUEST with the
// DISCOVER's options and the machine's address, unicast to the server's
// port 4011 from the firmware's port 4011 (-pxe-listen), without the
// broadcast flag,
// retransmitted after each of -pxe-req-timeouts (edk2 and PXE 2.1: 1, 2,
// 3, 4 s); the DHCPACK names the boot file and its server. It keeps the
// DISCOVER's xid.
func (b *booter) askBootServer(ctx context.Context, spec pxe.DiscoverSpec, ask bootAsk) (pxe.Reply, error) {
	ci, err := b.ciaddr(ask.server)
	if err != nil {
		return pxe.Reply{}, err
	}
	pkt, err := pxe.BuildRequest(b.m.MAC, pxe.RequestSpec{DiscoverSpec: spec, Ciaddr: ci, Item: ask.item})
	if err != nil {
		return pxe.Reply{}, err
	}
	pxe.SetXID(pkt, b.xid)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(ask.server, uint16(b.spec.PXEPort)))
	b.res.BootServer = dst.String()
	rep, re, err := b.mux.exchange(ctx, dhcpTx{pkt: pkt, xid: b.xid, mac: [6]byte(b.m.MAC), dst: dst, src: b.m.Src,
		request: true, fromPXE: true, timeouts: b.spec.PXEReqTimeouts,
		accept: func(r pxe.Reply) bool { return r.MsgType == pxe.MsgAck },
		what:   "requests to " + dst.String(), ignored: "replies that were not ACKs", noReply: errNoAck})
	b.res.DHCPRetransmits += re
	b.arrived = rep.Arrived
	b.res.ProxyRequests += re + 1
	if err != nil {
		return rep, err
	}
	if rep.BootFile == "" {
		return rep, fmt.Errorf("%w: ACK from %s names no boot file", errBadAck, dst)
	}
	return rep, nil
}

// ciaddr is the machine's own address, as its requests name it: its
// -src-ips address, or else the namespace's address towards server.
func (b *booter) ciaddr(server netip.Addr) (netip.Addr, error) {
	if b.m.Src.IsValid() {
		return b.m.Src, nil
	}
	return b.mux.localAddr(server)
}

// firstStage fetches the boot file the proxy offer or the boot server's
// ACK named: by TFTP from the next server, or by HTTP for UEFI HTTP boot.
func (b *booter) firstStage(ctx context.Context, offer pxe.Reply) error {
	if b.m.HTTPBoot {
		if !isHTTPURL(offer.BootFile) {
			return fmt.Errorf("%w: HTTP boot offer's boot file %q is not an http URL", errBadOffer, clip(offer.BootFile))
		}
		// The firmware's connection ends when the first stage starts; iPXE
		// opens its own.
		defer b.client.CloseIdleConnections()
		return b.download(ctx, offer.BootFile, "")
	}
	server := offer.Siaddr
	if !server.IsValid() || server.IsUnspecified() {
		server = offer.ServerID
	}
	if a, err := netip.ParseAddr(offer.TFTPServer); (!server.IsValid() || server.IsUnspecified()) && err == nil && a.Is4() {
		server = a
	}
	if !server.IsValid() || server.IsUnspecified() {
		return fmt.Errorf("%w: proxy offer or ACK names no next server (siaddr, option 54 or 66)", errBadOffer)
	}
	spec := b.spec.TFTP
	if b.m.BIOS {
		spec.WindowSize = 0 // BIOS PXE ROMs transfer in lock step
	}
	r, err := tftpGet(ctx, b.m.Src, server, offer.BootFile, spec)
	b.res.TFTPRetransmits += r.Retransmits
	b.res.Bytes += r.Bytes
	if err != nil {
		return fmt.Errorf("tftp://%s/%s: %w", server, offer.BootFile, err)
	}
	return nil
}

// ipxeDHCP plays iPXE's DHCP: the DISCOVER, then, when the proxy offer
// has no PXE options (a next server and a file, or a menu), the
// ProxyDHCPREQUEST to the proxy's port 4011, and, when the offer has a
// menu to boot, BIOS iPXE's boot server discovery; the last reply names
// the script.
func (b *booter) ipxeDHCP(ctx context.Context) (string, error) {
	spec := pxe.DiscoverSpec{Arch: b.m.ipxeArch(), VendorClass: b.m.ipxeClass(), UUID: b.m.uuidWire(), UserClass: "iPXE"}
	pkt, err := pxe.BuildDiscover(b.m.MAC, spec)
	if err != nil {
		return "", err
	}
	xid := b.xid + 1
	pxe.SetXID(pkt, xid)
	rep, re, err := b.mux.exchange(ctx, dhcpTx{pkt: pkt, xid: xid, mac: [6]byte(b.m.MAC),
		timeouts: b.spec.IPXETimeouts, accept: pxe.Reply.IsProxyOffer, what: "DISCOVERs", noReply: errNoOffer})
	b.res.DHCPRetransmits += re
	b.arrived = rep.Arrived
	if err != nil {
		return "", err
	}
	if !rep.HasPXEOptions() {
		if rep, err = b.ipxeProxyRequest(ctx, spec, rep); err != nil {
			return "", err
		}
	}
	if bootsMenu(rep) {
		// iPXE's PXE menu boot (usr/pxemenu.c), built for BIOS only
		// (PXE_MENU is a pcbios option).
		if !b.m.BIOS {
			return "", fmt.Errorf("%w: iPXE's offer has a PXE boot menu, which EFI iPXE cannot boot (PXE_MENU is BIOS only)", errBadOffer)
		}
		ask, err := menuAsk(rep)
		if err != nil {
			return "", err
		}
		if rep, err = b.ipxeBootServer(ctx, spec, *ask); err != nil {
			return "", err
		}
	}
	if !isHTTPURL(rep.BootFile) {
		return "", fmt.Errorf("%w: iPXE's offer names %q, not an http URL", errBadOffer, clip(rep.BootFile))
	}
	return rep.BootFile, nil
}

// ipxeProxyRequest sends iPXE's ProxyDHCPREQUEST (src/net/udp/dhcp.c,
// dhcp_state_proxy): the DISCOVER's options, ciaddr, the proxy in option
// 54 and the broadcast flag, from port 68 to the proxy's port 4011,
// retransmitted after each of -ipxe-req-timeouts (iPXE: 0.25, 0.5, 1,
// 2 s, then it gives up). Like iPXE it ignores answers without PXE
// options.
func (b *booter) ipxeProxyRequest(ctx context.Context, spec pxe.DiscoverSpec, offer pxe.Reply) (pxe.Reply, error) {
	server := firstAddr(offer.ServerID)
	if !server.IsValid() {
		return pxe.Reply{}, fmt.Errorf("%w: iPXE's proxy offer has no PXE options (next server and boot file, or a menu) and names no proxy to ask (option 54)", errBadOffer)
	}
	ci, err := b.ciaddr(server)
	if err != nil {
		return pxe.Reply{}, err
	}
	pkt, err := pxe.BuildRequest(b.m.MAC, pxe.RequestSpec{DiscoverSpec: spec, Ciaddr: ci, ServerID: server, Broadcast: true})
	if err != nil {
		return pxe.Reply{}, err
	}
	xid := b.xid + 1
	pxe.SetXID(pkt, xid)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, uint16(b.spec.PXEPort)))
	b.res.IPXEServer = dst.String()
	rep, re, err := b.mux.exchange(ctx, dhcpTx{pkt: pkt, xid: xid, mac: [6]byte(b.m.MAC), dst: dst, src: b.m.Src,
		request: true, timeouts: b.spec.IPXEReqTimeouts,
		accept: func(r pxe.Reply) bool {
			return (r.MsgType == pxe.MsgAck || r.MsgType == pxe.MsgOffer) && r.HasPXEOptions()
		},
		what: "ProxyDHCPREQUESTs to " + dst.String(), ignored: "replies without PXE options, which iPXE ignores", noReply: errNoAck})
	b.res.DHCPRetransmits += re
	b.arrived = rep.Arrived
	b.res.ProxyRequests += re + 1
	return rep, err
}

// ipxeBootServer is BIOS iPXE's boot server discovery for its menu's
// default item (pxebs, dhcp_state_pxebs): a DHCPREQUEST with sub-option
// 71, ciaddr and the broadcast flag, no option 54, from port 68 to the
// server's port 4011, retransmitted after each of -ipxe-bs-timeouts
// (iPXE: 1, 2, 4 s, then it gives up on the server); it takes only an
// ACK that echoes the type it asked for.
func (b *booter) ipxeBootServer(ctx context.Context, spec pxe.DiscoverSpec, ask bootAsk) (pxe.Reply, error) {
	ci, err := b.ciaddr(ask.server)
	if err != nil {
		return pxe.Reply{}, err
	}
	pkt, err := pxe.BuildRequest(b.m.MAC, pxe.RequestSpec{DiscoverSpec: spec, Ciaddr: ci, Item: ask.item, Broadcast: true})
	if err != nil {
		return pxe.Reply{}, err
	}
	xid := b.xid + 1
	pxe.SetXID(pkt, xid)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(ask.server, uint16(b.spec.PXEPort)))
	b.res.IPXEServer = dst.String()
	rep, re, err := b.mux.exchange(ctx, dhcpTx{pkt: pkt, xid: xid, mac: [6]byte(b.m.MAC), dst: dst, src: b.m.Src,
		request: true, timeouts: b.spec.IPXEBSTimeouts,
		accept: func(r pxe.Reply) bool {
			return r.MsgType == pxe.MsgAck && r.PXE.Item != nil && r.PXE.Item.Type == ask.item.Type
		},
		what:    "boot server requests to " + dst.String(),
		ignored: fmt.Sprintf("replies that were not ACKs for type %#04x, which iPXE ignores", ask.item.Type), noReply: errNoAck})
	b.res.DHCPRetransmits += re
	b.arrived = rep.Arrived
	b.res.ProxyRequests += re + 1
	return rep, err
}

// scripts fetches the script the offer named and follows its chains until
// one has a kernel line.
func (b *booter) scripts(ctx context.Context, first string) (script, error) {
	settings := b.m.settings()
	seen := map[string]bool{}
	for u := first; ; {
		if len(seen) == maxChains {
			return script{}, fmt.Errorf("%w: %d scripts without a kernel line, the last %s", errTooDeep, maxChains, u)
		}
		seen[u] = true
		body, err := getScript(ctx, b.client, u, b.spec.HTTP.MaxScript)
		if err != nil {
			return script{}, err
		}
		base, _ := url.Parse(u)
		sc, err := parseScript(body, base, settings)
		if err != nil {
			return script{}, fmt.Errorf("%s: %w: %v", u, errNotIPXE, err)
		}
		switch {
		case sc.Kernel != "" && len(sc.Initrds) == 0:
			return sc, fmt.Errorf("%s: %w (kernel %s)", u, errNoInitrd, sc.Kernel)
		case sc.Kernel != "":
			b.res.Kernel, b.res.Initrds = sc.Kernel, sc.Initrds
			return sc, nil
		case sc.Chain == "":
			return sc, fmt.Errorf("%s: %w and no chain: %q", u, errNoKernel, clip(firstEcho(body)))
		case seen[sc.Chain]:
			return sc, fmt.Errorf("%s: %w: chains back to %s without a kernel line: %q", u, errChainLoop, sc.Chain, clip(firstEcho(body)))
		}
		u = sc.Chain
	}
}

// firstEcho is what a script that boots nothing tells its user, for the
// failure's message (siteboot's "machine … is not registered").
func firstEcho(body string) string {
	for line := range strings.Lines(body) {
		if w, ok := strings.CutPrefix(strings.TrimSpace(line), "echo "); ok {
			return w
		}
	}
	return ""
}

func (b *booter) download(ctx context.Context, u, sha string) error {
	n, err := download(ctx, b.client, u, sha, b.buf)
	b.res.Bytes += n
	return err
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != ""
}

// classify names a failure's reason for the summary: a few words that
// group machines that failed the same way; the error keeps the detail.
func classify(err error) string {
	var se *statusError
	switch {
	case errors.Is(err, errRunTimeout):
		return "run-timeout"
	case errors.Is(err, errMachineTimeout), errors.Is(err, context.DeadlineExceeded):
		return "machine-timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &se):
		return "http-" + strconv.Itoa(se.Code)
	}
	for _, c := range []struct {
		err    error
		reason string
	}{
		{errNoOffer, "no-offer"}, {errBadOffer, "bad-offer"}, {errNoAck, "no-ack"}, {errBadAck, "bad-ack"},
		{errTFTPTimeout, "tftp-timeout"}, {errTFTPServer, "tftp-error"}, {errTFTPSize, "size-mismatch"},
		{errTFTPProto, "tftp-protocol"}, {errHTTPSize, "size-mismatch"}, {errDigest, "sha256-mismatch"},
		{errNoLength, "no-content-length"}, {errNoKernel, "no-kernel"}, {errNoInitrd, "no-initrd"},
		{errChainLoop, "chain-loop"}, {errTooDeep, "chain-too-deep"}, {errNotIPXE, "not-ipxe-script"},
		{os.ErrDeadlineExceeded, "stalled"}, {syscall.ECONNREFUSED, "refused"}, {syscall.ECONNRESET, "reset"},
		{io.ErrUnexpectedEOF, "short-body"}, {syscall.EADDRNOTAVAIL, "no-source-address"},
	} {
		if errors.Is(err, c.err) {
			return c.reason
		}
	}
	return "error"
}
