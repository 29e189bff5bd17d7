package ipxe

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// outcome is what one render did, for the caller's log line and metric.
type outcome struct {
	req    *sitev1.IpxeScriptRequest // normalised; nil when the request was refused
	epoch  uint64
	kind   string
	script *sitev1.IpxeScript
}

// Render returns the script the machine described by req would get from
// /ipxe now, using Config.BaseURL. req.ip is what the assertion vouches
// for. Errors: *RequestError (a field failed validation), ErrFenced,
// *UnknownMachineError (it carries the script an unknown machine gets),
// *SecretError, *EntryError. Render records no discovery sighting.
func (s *Server) Render(ctx context.Context, req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScript, error) {
	if s.base == "" {
		return nil, errors.New("ipxe: Render needs Config.BaseURL (it is derived per request only over HTTP)")
	}
	out, err := s.render(ctx, req, s.base, forMachine)
	return out.script, err
}

// Redacted stands in a previewed script for the discovery token and the
// signed assertion unless secrets were asked for.
const Redacted = "REDACTED"

// Preview is Render for an operator rather than a machine, with the
// appliance's base URL given (for an appliance whose Config.BaseURL is
// empty, derived per request over HTTP). Unless reveal is set, the
// discovery token is resolved (so a ref that fails still fails here) but
// shown as Redacted, and no assertion is signed: Redacted stands in its
// place, so a preview never hands out a signature the appliance did not
// give a machine. The caller decides who may reveal.
func (s *Server) Preview(ctx context.Context, req *sitev1.IpxeScriptRequest, base string, reveal bool) (*sitev1.IpxeScript, error) {
	b, err := checkBaseURL(base)
	if err != nil {
		return nil, &RequestError{Field: "base_url", Reason: err.Error()}
	}
	mode := previewRedacted
	if reveal {
		mode = forMachine
	}
	out, err := s.render(ctx, req, b, mode)
	return out.script, err
}

// renderMode says who a script is for.
type renderMode int

const (
	forMachine      renderMode = iota // everything, signed
	previewRedacted                   // token and assertion replaced by Redacted
)

func (s *Server) render(ctx context.Context, req *sitev1.IpxeScriptRequest, base string, mode renderMode) (outcome, error) {
	n, err := normalize(req)
	if err != nil {
		return outcome{}, err
	}
	out := outcome{req: n}
	epoch, open := s.cfg.Gate.Gate()
	if !open {
		return out, ErrFenced
	}
	out.epoch = epoch
	now := s.cfg.Now()
	e, ok := s.cfg.Entries.Lookup(n.GetMac(), now)
	if !ok {
		out.kind = kindUnknown
		return out, s.unknownMachine(base, n.GetMac(), "", now)
	}
	if !e.AcceptsUUID(n.GetUuid()) {
		out.kind = kindMismatch
		return out, s.unknownMachine(base, n.GetMac(), uuidMismatch(e.ProductUUID, n.GetUuid()), now)
	}
	switch {
	case e.SanbootSHA256 != "":
		out.kind = kindSanboot
		out.script, err = s.sanboot(base, &e)
	case e.IPXEScriptURL != "":
		out.kind = kindChain
		out.script, err = s.chain(base, &e)
	default:
		out.kind = kindRamdisk
		out.script, out.epoch, err = s.ramdisk(ctx, base, n, &e, now, mode)
	}
	return out, err
}

// unknownMachine is the error, carrying the script, for a machine that is
// answered as unknown; reason says why when it has an entry.
func (s *Server) unknownMachine(base, mac, reason string, now time.Time) *UnknownMachineError {
	script := &sitev1.IpxeScript{
		Script:   unknownScript(base, mac, s.cfg.Retry),
		NotAfter: timestamppb.New(now.Add(s.cfg.Retry)),
	}
	return &UnknownMachineError{MAC: mac, Reason: reason, Script: script}
}

// uuidMismatch says why a pinned entry refused a request.
func uuidMismatch(pin, got string) string {
	if got == "" {
		return "the entry pins product_uuid " + pin + "; the request carried no uuid"
	}
	return "the entry pins product_uuid " + pin + "; the request carried " + got
}

func (s *Server) sanboot(base string, e *bootentry.Entry) (*sitev1.IpxeScript, error) {
	if err := bootentry.CheckSanbootHex(e.SanbootSHA256); err != nil {
		return nil, &EntryError{MAC: e.MAC, Reason: "sanboot_sha256: " + err.Error()}
	}
	return &sitev1.IpxeScript{
		Script:   sanbootScript([]string{base}, e.SanbootSHA256, s.cfg.Retry),
		NotAfter: timestamppb.New(e.NotAfter),
	}, nil
}

func (s *Server) chain(base string, e *bootentry.Entry) (*sitev1.IpxeScript, error) {
	if err := bootentry.CheckScriptURL(e.IPXEScriptURL); err != nil {
		return nil, &EntryError{MAC: e.MAC, Reason: "ipxe_script_url: " + err.Error()}
	}
	return &sitev1.IpxeScript{
		Script:   chainScript(base, e.IPXEScriptURL, s.cfg.Retry),
		NotAfter: timestamppb.New(e.NotAfter),
	}, nil
}

// ramdisk resolves the token, re-checks the gate, signs the assertion,
// checks the gate once more and renders the script. It returns the epoch the assertion carries.
func (s *Server) ramdisk(ctx context.Context, base string, n *sitev1.IpxeScriptRequest, e *bootentry.Entry, now time.Time, mode renderMode) (*sitev1.IpxeScript, uint64, error) {
	if !s.hasRamdisk() {
		return nil, 0, &EntryError{MAC: n.GetMac(), Reason: "no ramdisk profile is configured (ramdisk.kernel, ramdisk.initrd)"}
	}
	token, err := s.token(ctx, e)
	if err != nil {
		return nil, 0, err
	}
	// The gate is checked right before the signature.
	epoch, open := s.cfg.Gate.Gate()
	if !open {
		return nil, 0, ErrFenced
	}
	notAfter := now.Add(s.cfg.AssertionTTL)
	if na := e.NotAfter; na.Before(notAfter) {
		notAfter = na
	}
	assertion := Redacted
	if mode == previewRedacted {
		if token != nil {
			token = []byte(Redacted)
		}
	} else {
		if assertion, err = s.sign(n, e, epoch, now, notAfter); err != nil {
			return nil, 0, err
		}
		// And right after it: a gate that closed (or moved to another
		// epoch) while the key signed means the signature may postdate the
		// lease; it is dropped, never served.
		if after, open := s.cfg.Gate.Gate(); !open || after != epoch {
			return nil, 0, ErrFenced
		}
	}
	p := ramdiskParams{
		siteID: s.cfg.SiteID, appliance: base, mac: n.GetMac(),
		workflowID: e.WorkflowID, token: string(token), assertion: assertion,
	}
	cmdline := p.cmdline(s.cmdline)
	if len(cmdline) > maxCmdline {
		return nil, 0, &EntryError{MAC: n.GetMac(), Reason: fmt.Sprintf("the kernel command line would be %d bytes, over the %d-byte limit", len(cmdline), maxCmdline)}
	}
	script := ramdiskScript(base, n.GetMac(), s.kernel.resolve(base), s.initrd.resolve(base), cmdline, s.cfg.Retry)
	return &sitev1.IpxeScript{Script: script, NotAfter: timestamppb.New(notAfter)}, epoch, nil
}

// token resolves the entry's discovery token; nil when it has no ref.
func (s *Server) token(ctx context.Context, e *bootentry.Entry) ([]byte, error) {
	ref := e.DiscoveryTokenRef
	if ref == "" {
		return nil, nil
	}
	if s.cfg.Secrets == nil {
		return nil, &SecretError{Ref: ref, Err: errors.New("no secret resolver is configured")}
	}
	v, err := s.cfg.Secrets.Resolve(ctx, ref)
	if err != nil {
		return nil, &SecretError{Ref: ref, Err: err}
	}
	if len(v) == 0 || len(v) > maxTokenBytes {
		return nil, &SecretError{Ref: ref, Err: fmt.Errorf("the token is %d bytes; want 1-%d", len(v), maxTokenBytes)}
	}
	return v, nil
}

// sign builds and signs the DiscoveryAssertion and returns it as unpadded
// base64url of the serialized SignedDiscoveryAssertion. It says only what
// this appliance observed: mac is the entry's, ip the address the request
// came from (n.ip), product_uuid the one its DHCP proxy saw (see
// observedUUID), never one the HTTP query alone claims.
func (s *Server) sign(n *sitev1.IpxeScriptRequest, e *bootentry.Entry, epoch uint64, now, notAfter time.Time) (string, error) {
	a := &sitev1.DiscoveryAssertion{
		SiteId:          s.cfg.SiteID,
		SiteAgentNodeId: s.cfg.NodeID,
		BootLeaseEpoch:  epoch,
		Mac:             e.MAC,
		Ip:              n.GetIp(),
		ProductUuid:     s.observedUUID(e, now),
		WorkflowId:      e.WorkflowID,
		IssuedAt:        timestamppb.New(now),
		NotAfter:        timestamppb.New(notAfter),
	}
	sa, err := s.cfg.Signer.SignAssertion(a)
	if err != nil {
		return "", fmt.Errorf("ipxe: sign assertion: %w", err)
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(sa)
	if err != nil {
		return "", fmt.Errorf("ipxe: encode assertion: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(wire), nil
}

// observedUUID is the product_uuid an assertion for e may carry: the pin of
// a pinned entry (the request presented it, and the DHCP proxy answered
// only option 97 with it); else the UUID in the latest DHCP request the
// proxy saw from the MAC within the observations' age, unless requests
// for the MAC disagreed on it (discovery.Observations.LastSeen); else none.
func (s *Server) observedUUID(e *bootentry.Entry, now time.Time) string {
	if e.ProductUUID != "" {
		return e.ProductUUID
	}
	if s.cfg.Observed == nil {
		return ""
	}
	ob, ok := s.cfg.Observed.LastSeen(e.MAC, now)
	if !ok {
		return ""
	}
	return ob.ProductUUID
}
