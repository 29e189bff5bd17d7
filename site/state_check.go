package site

import (
	"errors"
	"fmt"
	"github.com/siteboot/siteboot/bootentry"
	"slices"
	"time"
	"unicode/utf8"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// What the state machine checks before it applies a command or restores a
// snapshot. The rules are the API's (validate.go, spec.go) minus those that
// need a clock or this appliance's configuration, because every replica
// must reach the same result from the same log:
//
//   - not_after must be present and a valid timestamp; that it lies in the
//     future and within entries.max_ttl is checked by the API only. An
//     expired entry is harmless (it is never answered and the janitor
//     purges it), and max_ttl is local configuration other replicas need
//     not share.
//   - sanboot_sha256 must be a 32-byte digest; that the image cache holds it
//     READY is checked by the API only (the cache is local).
//   - a command's time is its own at field, never the replica's clock.

// maxSkipLines bounds the log lines one command or one restore writes about
// what it skipped; one more line counts the rest.
const maxSkipLines = 8

// maxReasonLen bounds a logged reason: it may quote a value from the log.
const maxReasonLen = 200

// requireNotAfter is the state machine's not_after policy.
func requireNotAfter(field string, ts *timestamppb.Timestamp) (*timestamppb.Timestamp, error) {
	if ts == nil {
		return nil, fieldErr(field, "is required")
	}
	if err := ts.CheckValid(); err != nil {
		return nil, fieldErr(field, "%v", err)
	}
	return ts, nil
}

// checkAt checks a command's at: the proposer's clock, which every command
// the Store proposes carries.
func checkAt(at *timestamppb.Timestamp) error {
	if at == nil {
		return fieldErr("at", "is required (the proposer's time)")
	}
	if err := at.CheckValid(); err != nil {
		return fieldErr("at", "%v", err)
	}
	return nil
}

// checkExpire returns the time before which an ExpireEntries purges. It may
// not lie after the command's own time: the Store proposes its clock for
// both.
func checkExpire(e *statev1.ExpireEntries, at *timestamppb.Timestamp) (time.Time, error) {
	before, err := requireNotAfter("expire_entries.before", e.GetBefore())
	if err != nil {
		return time.Time{}, err
	}
	if before.AsTime().After(at.AsTime()) {
		return time.Time{}, fieldErr("expire_entries.before", "%s is after the command's at %s",
			before.AsTime().UTC().Format(time.RFC3339Nano), at.AsTime().UTC().Format(time.RFC3339Nano))
	}
	return before.AsTime(), nil
}

// validEntry is an entry of a PutEntries that passed the rules, with its
// index in the command.
type validEntry struct {
	index int
	entry *sitev1.ProxyDhcpEntry
}

// validPut returns the normalised entries of p that pass the entry rules,
// logging and counting those that do not.
func (s *State) validPut(p *statev1.PutEntries) []validEntry {
	var skipped []error
	out := make([]validEntry, 0, len(p.GetEntries()))
	set := newEntrySet(len(p.GetEntries()))
	for i, e := range p.GetEntries() {
		n, err := set.add(i, e, requireNotAfter)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		out = append(out, validEntry{index: i, entry: n})
	}
	s.reportSkipped("entry", skipped, "node", p.GetNodeId())
	return out
}

// checkStored checks an entry as a snapshot holds it and returns its
// normalised copy.
func checkStored(field string, se *statev1.StoredEntry) (*statev1.StoredEntry, error) {
	if err := ValidateNodeID(field+".node_id", se.GetNodeId()); err != nil {
		return nil, err
	}
	if se.GetEntry() == nil {
		return nil, fieldErr(field+".entry", "is empty")
	}
	e, err := normalizeEntry(field+".entry", se.GetEntry())
	if err != nil {
		return nil, err
	}
	if e.NotAfter, err = requireNotAfter(field+".entry.not_after", se.GetEntry().GetNotAfter()); err != nil {
		return nil, err
	}
	if c := se.GetCreatedAt(); c != nil {
		if err := c.CheckValid(); err != nil {
			return nil, fieldErr(field+".created_at", "%v", err)
		}
	}
	return &statev1.StoredEntry{NodeId: se.GetNodeId(), Entry: e, CreatedAt: se.GetCreatedAt()}, nil
}

// ValidateStoredEntry reports whether se could be held by the state as it
// is: it passes the rules the state machine applies and is already in
// normalised form.
func ValidateStoredEntry(se *statev1.StoredEntry) error {
	n, err := checkStored("entry", se)
	if err != nil {
		return err
	}
	if !proto.Equal(n, se) {
		return fieldErr("entry", "is not in normalised form")
	}
	return nil
}

func (s *State) restoreEntries(in []*statev1.StoredEntry) (map[string]*statev1.StoredEntry, map[string]bootentry.Entry, map[string]map[string]struct{}) {
	byMAC := make(map[string]*statev1.StoredEntry, min(len(in), MaxEntries))
	boot := make(map[string]bootentry.Entry, min(len(in), MaxEntries))
	byNode := make(map[string]map[string]struct{})
	var skipped []error
	for i, raw := range in {
		field := fmt.Sprintf("entries[%d]", i)
		se, err := checkStored(field, raw)
		if err == nil && len(byMAC) >= MaxEntries {
			err = &LimitError{Reason: fmt.Sprintf("%s: past the limit of %d entries", field, MaxEntries)}
		}
		if err == nil {
			if old, dup := byMAC[se.GetEntry().GetMac()]; dup {
				err = fieldErr(field+".entry.mac", "%s is held by node %q already", se.GetEntry().GetMac(), old.GetNodeId())
			}
		}
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		mac := se.GetEntry().GetMac()
		byMAC[mac] = se
		boot[mac] = bootView(se)
		if byNode[se.GetNodeId()] == nil {
			byNode[se.GetNodeId()] = make(map[string]struct{})
		}
		byNode[se.GetNodeId()][mac] = struct{}{}
	}
	s.reportSkipped("snapshot_entry", skipped)
	return byMAC, boot, byNode
}

func (s *State) restoreImages(in []*statev1.ImageWant) map[string]*statev1.ImageWant {
	images := make(map[string]*statev1.ImageWant, min(len(in), MaxImages))
	var skipped []error
	for i, w := range in {
		err := ValidateImageWant(w)
		if err == nil {
			if _, dup := images[string(w.GetImage().GetSha256())]; dup {
				err = fieldErr("image.sha256", "%x is listed twice", w.GetImage().GetSha256())
			} else if len(images) >= MaxImages {
				err = &LimitError{Reason: fmt.Sprintf("past the limit of %d hand-added images", MaxImages)}
			}
		}
		if err != nil {
			skipped = append(skipped, prefixed(fmt.Sprintf("images[%d]", i), err))
			continue
		}
		images[string(w.GetImage().GetSha256())] = w
	}
	s.reportSkipped("snapshot_image", skipped)
	return images
}

// restoreSpec returns the snapshot's spec, or nil (no spec applied yet)
// when it breaks a rule: a spec is applied whole or not at all.
func (s *State) restoreSpec(in *sitev1.SiteSpec) *sitev1.SiteSpec {
	if in == nil {
		return nil
	}
	spec, err := ValidateSiteSpec(in)
	if err != nil {
		s.reportSkipped("snapshot_spec", []error{prefixed("spec", err)})
		return nil
	}
	return spec
}

// refused logs and counts a command the state machine refuses whole, and
// returns err as the command's result.
func (s *State) refused(err error) error {
	s.reportSkipped("command", []error{err})
	return err
}

// reportSkipped logs (at most maxSkipLines lines) and counts what was
// skipped.
func (s *State) reportSkipped(what string, errs []error, attrs ...any) {
	if len(errs) == 0 {
		return
	}
	s.skipped.WithLabelValues(what).Add(float64(len(errs)))
	for i, err := range errs {
		if i == maxSkipLines {
			s.log.Warn("site: more skipped", slices.Concat(attrs, []any{"what", what, "count", len(errs) - i})...)
			return
		}
		s.log.Warn("site: skipped: it breaks a validation rule", slices.Concat(attrs, []any{"what", what}, errAttrs(err))...)
	}
}

// errAttrs names the field and the reason of a refusal, the reason
// clipped: it may quote a value of any length from the log.
func errAttrs(err error) []any {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return []any{"field", fe.Field, "reason", clip(fe.Reason)}
	}
	return []any{"reason", clip(err.Error())}
}

// prefixed puts prefix before the field an error names.
func prefixed(prefix string, err error) error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return &FieldError{Field: prefix + "." + fe.Field, Reason: fe.Reason}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

func clip(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	cut := maxReasonLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
