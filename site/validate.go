package site

import (
	"fmt"
	"net/url"
	"time"

	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/secretref"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds on what a request may carry.
const (
	MaxEntriesPerRequest = 256
	maxIDLen             = 128
)

// Limits are the validation settings that come from configuration.
type Limits struct {
	// DefaultTTL fills not_after when an entry has none.
	DefaultTTL time.Duration
	// MaxTTL bounds how far in the future not_after may lie; 0 means no bound.
	MaxTTL time.Duration
}

// ValidateNodeID checks a node id: 1-128 characters of letters, digits and
// . _ - : @.
func ValidateNodeID(field, id string) error {
	if id == "" {
		return fieldErr(field, "is required")
	}
	return validateID(field, id)
}

func validateID(field, id string) error {
	if len(id) > maxIDLen {
		return fieldErr(field, "longer than %d characters", maxIDLen)
	}
	for _, c := range id {
		ok := c == '.' || c == '_' || c == '-' || c == ':' || c == '@' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return fieldErr(field, "%q has character %q; allowed are letters, digits and . _ - : @", id, c)
		}
	}
	return nil
}

// ValidateEntries checks one node's entries and returns normalised copies:
// MACs in lowercase colon form, product UUIDs lowercased, not_after filled
// from the default ttl. The input is not modified. now is the server time.
func ValidateEntries(nodeID string, entries []*sitev1.ProxyDhcpEntry, now time.Time, lim Limits) ([]*sitev1.ProxyDhcpEntry, error) {
	if err := ValidateNodeID("node_id", nodeID); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fieldErr("entries", "at least one entry is required")
	}
	if len(entries) > MaxEntriesPerRequest {
		return nil, fieldErr("entries", "%d entries; at most %d per request", len(entries), MaxEntriesPerRequest)
	}
	out := make([]*sitev1.ProxyDhcpEntry, 0, len(entries))
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		field := fmt.Sprintf("entries[%d]", i)
		if e == nil {
			return nil, fieldErr(field, "is empty")
		}
		n, err := validateEntry(field, e, now, lim)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[n.Mac]; dup {
			return nil, fieldErr(field+".mac", "%s is also entries[%d].mac; one entry per MAC", n.Mac, j)
		}
		seen[n.Mac] = i
		out = append(out, n)
	}
	return out, nil
}

// validateEntry checks one entry with the boot path's own rules (package
// bootentry), so that an entry stored here is one the DHCP proxy and the
// script renderer can always serve.
func validateEntry(field string, in *sitev1.ProxyDhcpEntry, now time.Time, lim Limits) (*sitev1.ProxyDhcpEntry, error) {
	e := proto.CloneOf(in)
	mac, err := bootentry.NormalizeMAC(in.GetMac())
	if err != nil {
		return nil, fieldErr(field+".mac", "%v", err)
	}
	e.Mac = mac
	if in.GetProductUuid() != "" {
		if e.ProductUuid, err = bootentry.CheckProductUUID(in.GetProductUuid()); err != nil {
			return nil, fieldErr(field+".product_uuid", "%v", err)
		}
	}
	if _, known := sitev1.BootArch_name[int32(in.GetArch())]; !known {
		return nil, fieldErr(field+".arch", "unknown boot arch %d", in.GetArch())
	}
	if err := bootentry.CheckBootFile(in.GetBootFile()); err != nil {
		return nil, fieldErr(field+".boot_file", "%v", err)
	}
	if in.GetIpxeScriptUrl() != "" {
		if err := bootentry.CheckScriptURL(in.GetIpxeScriptUrl()); err != nil {
			return nil, fieldErr(field+".ipxe_script_url", "%v", err)
		}
	}
	if err := validateID(field+".workflow_id", in.GetWorkflowId()); err != nil {
		return nil, err
	}
	if ref := in.GetDiscoveryTokenRef(); ref != "" {
		if _, err := secretref.Parse(ref); err != nil {
			return nil, fieldErr(field+".discovery_token_ref", "%v", err)
		}
	}
	if err := bootentry.CheckSanbootSHA256(in.GetSanbootSha256()); err != nil {
		return nil, fieldErr(field+".sanboot_sha256", "%v", err)
	}
	if e.NotAfter, err = validateNotAfter(field+".not_after", in.GetNotAfter(), now, lim); err != nil {
		return nil, err
	}
	return e, nil
}

func validateNotAfter(field string, ts *timestamppb.Timestamp, now time.Time, lim Limits) (*timestamppb.Timestamp, error) {
	if ts == nil {
		if lim.DefaultTTL <= 0 {
			return nil, fieldErr(field, "is required (no default ttl is configured)")
		}
		return timestamppb.New(now.Add(lim.DefaultTTL)), nil
	}
	if err := ts.CheckValid(); err != nil {
		return nil, fieldErr(field, "%v", err)
	}
	t := ts.AsTime()
	if !t.After(now) {
		return nil, fieldErr(field, "%s is not in the future (server time %s)", t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if lim.MaxTTL > 0 && t.Sub(now) > lim.MaxTTL {
		return nil, fieldErr(field, "%s is more than %s ahead (the maximum ttl)", t.UTC().Format(time.RFC3339), lim.MaxTTL)
	}
	return timestamppb.New(t), nil
}

// maxURLLen bounds a cache image URL.
const maxURLLen = 2048

// validateHTTPURL checks a URL the appliance itself fetches (a cache
// image's origin); URLs that reach a machine follow bootentry's rules.
func validateHTTPURL(field, s string) error {
	if len(s) > maxURLLen {
		return fieldErr(field, "longer than %d characters", maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fieldErr(field, "%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fieldErr(field, "%q must be an absolute http:// or https:// URL", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fieldErr(field, "%q has no host", s)
	}
	if u.User != nil {
		return fieldErr(field, "must not carry credentials in the URL")
	}
	return nil
}

// ValidateCleanUp checks a boot.cleanUp request and returns a copy with its
// MACs normalised.
func ValidateCleanUp(in *sitev1.BootCleanUpRequest) (*sitev1.BootCleanUpRequest, error) {
	if err := ValidateNodeID("node_id", in.GetNodeId()); err != nil {
		return nil, err
	}
	if err := validateID("workflow_id", in.GetWorkflowId()); err != nil {
		return nil, err
	}
	if len(in.GetMacs()) > MaxEntriesPerRequest {
		return nil, fieldErr("macs", "%d MACs; at most %d per request", len(in.GetMacs()), MaxEntriesPerRequest)
	}
	out := &sitev1.BootCleanUpRequest{NodeId: in.GetNodeId(), WorkflowId: in.GetWorkflowId()}
	for i, m := range in.GetMacs() {
		mac, err := bootentry.NormalizeMAC(m)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("macs[%d]", i), "%v", err)
		}
		out.Macs = append(out.Macs, mac)
	}
	return out, nil
}
