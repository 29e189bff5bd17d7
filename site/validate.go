package site

import (
	"fmt"
	"net/url"
	"time"

	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redact"
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
	// SecretRef, when set, checks a discovery_token_ref against where this
	// appliance may resolve secrets (secretref.Policy.Check): a ref that
	// could never resolve here is refused when the entry is stored, naming
	// the ref and why. It needs local configuration, so only the API checks
	// it; the state machine checks the ref's syntax alone.
	SecretRef func(ref string) error
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
	if err := checkEntryBatch(nodeID, len(entries)); err != nil {
		return nil, err
	}
	notAfter := func(field string, ts *timestamppb.Timestamp) (*timestamppb.Timestamp, error) {
		return validateNotAfter(field, ts, now, lim)
	}
	out := make([]*sitev1.ProxyDhcpEntry, 0, len(entries))
	set := newEntrySet(len(entries))
	for i, e := range entries {
		n, err := set.add(i, e, notAfter)
		if err != nil {
			return nil, err
		}
		if ref := n.GetDiscoveryTokenRef(); ref != "" && lim.SecretRef != nil {
			if err := lim.SecretRef(ref); err != nil {
				return nil, fieldErr(fmt.Sprintf("entries[%d].discovery_token_ref", i), "%v", err)
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// checkEntryBatch holds the rules for one node's batch of entries as a
// whole: a valid node id and 1 to MaxEntriesPerRequest entries.
func checkEntryBatch(nodeID string, n int) error {
	if err := ValidateNodeID("node_id", nodeID); err != nil {
		return err
	}
	if n == 0 {
		return fieldErr("entries", "at least one entry is required")
	}
	if n > MaxEntriesPerRequest {
		return fieldErr("entries", "%d entries; at most %d per request", n, MaxEntriesPerRequest)
	}
	return nil
}

// notAfterPolicy checks (and may fill) an entry's not_after. The API's
// policy reads the clock and the configured ttls; the state machine's
// cannot (see requireNotAfter).
type notAfterPolicy func(field string, ts *timestamppb.Timestamp) (*timestamppb.Timestamp, error)

// entrySet checks the entries of one batch in order: each against the
// entry rules, and their MACs against each other (one entry per MAC).
type entrySet struct{ seen map[string]int }

func newEntrySet(n int) *entrySet { return &entrySet{seen: make(map[string]int, n)} }

// add checks entries[i] and returns its normalised copy.
func (s *entrySet) add(i int, e *sitev1.ProxyDhcpEntry, notAfter notAfterPolicy) (*sitev1.ProxyDhcpEntry, error) {
	field := fmt.Sprintf("entries[%d]", i)
	if e == nil {
		return nil, fieldErr(field, "is empty")
	}
	n, err := normalizeEntry(field, e)
	if err != nil {
		return nil, err
	}
	if n.NotAfter, err = notAfter(field+".not_after", e.GetNotAfter()); err != nil {
		return nil, err
	}
	if j, dup := s.seen[n.Mac]; dup {
		return nil, fieldErr(field+".mac", "%s is also entries[%d].mac; one entry per MAC", n.Mac, j)
	}
	s.seen[n.Mac] = i
	return n, nil
}

// normalizeEntry holds every rule on an entry's fields that needs neither a
// clock nor this appliance's configuration: the API, the state machine's
// apply and a snapshot restore all call it, so a rule added here holds for
// all three. It returns a normalised copy; not_after is left to the
// caller's policy.
func normalizeEntry(field string, in *sitev1.ProxyDhcpEntry) (*sitev1.ProxyDhcpEntry, error) {
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
		return fieldErr(field, "is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fieldErr(field, "%q must be an absolute http:// or https:// URL", redact.URL(s))
	}
	if u.Host == "" || u.Hostname() == "" {
		return fieldErr(field, "%q has no host", redact.URL(s))
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
