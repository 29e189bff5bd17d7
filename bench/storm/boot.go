package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	ScriptURL  string             `json:"script_url,omitempty"`
	Kernel     string             `json:"kernel,omitempty"`
	Initrds    []string           `json:"initrds,omitempty"`
	Bytes      int64              `json:"bytes"` // first stage, kernel and initrds
	// Retransmits of DISCOVERs (both exchanges) and of TFTP requests/ACKs.
	DHCPRetransmits int `json:"dhcp_retransmits"`
	TFTPRetransmits int `json:"tftp_retransmits"`
}

// bootSpec is everything but the machine that a boot depends on.
type bootSpec struct {
	PXETimeouts  []time.Duration
	IPXETimeouts []time.Duration
	TFTP         tftpSpec
	HTTP         httpSpec
	KernelSHA256 string
	InitrdSHA256 string
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
}

// fail records err as the failure of step.
func (b *booter) fail(step string, err error) {
	b.res.FailedStep, b.res.Reason, b.res.Error = step, classify(err), err.Error()
}

// timed runs one step and records its duration, also when it fails.
func (b *booter) timed(step string, fn func() error) bool {
	t0 := time.Now()
	err := fn()
	b.res.Steps[step] = time.Since(t0).Seconds()
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

func (b *booter) pxeDHCP(ctx context.Context) (pxe.Reply, error) {
	pkt, err := pxe.BuildDiscover(b.m.MAC, pxe.DiscoverSpec{Arch: b.m.arch(), VendorClass: b.m.firmwareClass(), UUID: b.m.uuidWire()})
	if err != nil {
		return pxe.Reply{}, err
	}
	pxe.SetXID(pkt, b.xid)
	accept := pxe.Reply.IsProxyOffer
	if b.m.HTTPBoot {
		accept = pxe.Reply.IsHTTPProxyOffer
	}
	rep, re, err := b.mux.exchange(ctx, pkt, b.xid, [6]byte(b.m.MAC), b.spec.PXETimeouts, accept)
	b.res.DHCPRetransmits += re
	if err != nil {
		return rep, err
	}
	b.res.BootFile = rep.BootFile
	if rep.BootFile == "" {
		return rep, fmt.Errorf("%w: proxy offer from %v names no boot file", errBadOffer, rep.ServerID)
	}
	return rep, nil
}

// firstStage fetches the boot file the proxy offer named: by TFTP from
// the next server, or by HTTP for UEFI HTTP boot.
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
		return fmt.Errorf("%w: proxy offer names no next server (siaddr, option 54 or 66)", errBadOffer)
	}
	r, err := tftpGet(ctx, b.m.Src, server, offer.BootFile, b.spec.TFTP)
	b.res.TFTPRetransmits += r.Retransmits
	b.res.Bytes += r.Bytes
	if err != nil {
		return fmt.Errorf("tftp://%s/%s: %w", server, offer.BootFile, err)
	}
	return nil
}

func (b *booter) ipxeDHCP(ctx context.Context) (string, error) {
	pkt, err := pxe.BuildDiscover(b.m.MAC, pxe.DiscoverSpec{Arch: b.m.ipxeArch(), VendorClass: b.m.ipxeClass(),
		UUID: b.m.uuidWire(), UserClass: "iPXE"})
	if err != nil {
		return "", err
	}
	pxe.SetXID(pkt, b.xid+1)
	rep, re, err := b.mux.exchange(ctx, pkt, b.xid+1, [6]byte(b.m.MAC), b.spec.IPXETimeouts, pxe.Reply.IsProxyOffer)
	b.res.DHCPRetransmits += re
	if err != nil {
		return "", err
	}
	if !isHTTPURL(rep.BootFile) {
		return "", fmt.Errorf("%w: iPXE's offer names %q, not an http URL", errBadOffer, clip(rep.BootFile))
	}
	return rep.BootFile, nil
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
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
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
		{errNoOffer, "no-offer"}, {errBadOffer, "bad-offer"},
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
