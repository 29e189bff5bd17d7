package e2e

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// answer is one answer the probe got: a proxyDHCP offer to its broadcast
// DISCOVER, or an /ipxe script with a signed assertion.
type answer struct {
	// Kind is kindDHCP or kindIPXE.
	Kind string
	// Sent and Received bound the instant the responder answered.
	Sent, Received time.Time
	// Responder is the node that answered: the server identifier of an
	// offer, the appliance asked for a script.
	Responder string
	// Epoch and IssuedAt are the script's assertion's boot_lease_epoch
	// and issued_at (zero for offers).
	Epoch    uint64
	IssuedAt time.Time
	// Err says why an answer could not be attributed or verified (an
	// unknown server identifier, a signature by another node's key…).
	Err string
}

const (
	kindDHCP = "dhcp"
	kindIPXE = "ipxe"
)

func (a answer) String() string {
	s := fmt.Sprintf("%s from %s sent %s received %s", a.Kind, a.Responder, a.Sent.Format("15:04:05.000"), a.Received.Format("15:04:05.000"))
	if a.Kind == kindIPXE {
		s += fmt.Sprintf(" epoch %d issued %s", a.Epoch, a.IssuedAt.Format("15:04:05.000"))
	}
	if a.Err != "" {
		s += " error: " + a.Err
	}
	return s
}

// fenceEvent is a node closing its gate for an epoch, as its log says.
type fenceEvent struct {
	Node  string
	Epoch uint64
	// At is when the gate closed: the valid_until the node logged, else
	// the time of the log line.
	At time.Time
}

// faultWindow is one injected fault: service must be back within the
// bound after ResumeFrom (the fault's start for a fault the others take
// over from, its end for one nobody can take over from).
type faultWindow struct {
	Name                   string
	Start, End, ResumeFrom time.Time
}

// checkInput is a whole run for the checker.
type checkInput struct {
	Answers []answer
	Fences  []fenceEvent
	Faults  []faultWindow
	// ResumeBound is how long after ResumeFrom the probe must again get a
	// script (2×ttl + margin + a few seconds).
	ResumeBound time.Duration
	// Slack is how much earlier than a node's first script of a new epoch
	// an offer of its may come (the probe's period, about): its DHCP and
	// /ipxe loops do not run in lockstep.
	Slack time.Duration
}

// violation is one broken rule.
type violation struct {
	Rule   string
	Detail string
}

func (v violation) String() string { return v.Rule + ": " + v.Detail }

// Rules the checker enforces.
const (
	ruleInvalid   = "invalid-answer"  // an answer that cannot be attributed or verified
	ruleDouble    = "double-answer"   // two responders answered in overlapping windows
	ruleInterleav = "interleaved"     // another responder answered inside a tenure
	ruleEpochDown = "epoch-decreased" // an older epoch answered after a newer one
	ruleEpochUsed = "epoch-reused"    // one epoch served by two responders
	ruleFenced    = "after-fence"     // a node answered after it fenced itself
	ruleNoResume  = "no-resume"       // service did not come back after a fault
	ruleNoAnswers = "no-answers"      // the probe never got a script
)

// maxPerRule bounds what one rule reports.
const maxPerRule = 10

// checkLease returns every broken rule of the run, at most maxPerRule
// each, in rule order.
func checkLease(in checkInput) []violation {
	ans := append([]answer(nil), in.Answers...)
	sort.SliceStable(ans, func(i, j int) bool { return ans[i].Sent.Before(ans[j].Sent) })
	var out []violation
	add := func(rule string, vs []string) {
		if len(vs) > maxPerRule {
			vs = append(vs[:maxPerRule], fmt.Sprintf("… and %d more", len(vs)-maxPerRule))
		}
		for _, v := range vs {
			out = append(out, violation{rule, v})
		}
	}
	var valid []answer
	var invalid []string
	for _, a := range ans {
		if a.Err != "" || a.Responder == "" {
			invalid = append(invalid, a.String())
			continue
		}
		valid = append(valid, a)
	}
	add(ruleInvalid, invalid)
	add(ruleDouble, doubleAnswers(valid))
	add(ruleInterleav, interleaved(valid))
	down, reused := epochOrder(valid)
	add(ruleEpochDown, down)
	add(ruleEpochUsed, reused)
	add(ruleFenced, afterFence(valid, in.Fences, in.Slack))
	add(ruleNoResume, noResume(valid, in.Faults, in.ResumeBound))
	if !hasScript(valid) {
		add(ruleNoAnswers, []string{fmt.Sprintf("%d answers recorded, no valid script among them", len(ans))})
	}
	return out
}

func hasScript(ans []answer) bool {
	for _, a := range ans {
		if a.Kind == kindIPXE {
			return true
		}
	}
	return false
}

// doubleAnswers: two answers by different responders whose windows
// overlap. A handover leaves a gap of at least the margin between the old
// holder's last answer and the new one's first, far more than a window.
// ans is sorted by Sent.
func doubleAnswers(ans []answer) []string {
	var out []string
	var open []answer // earlier answers whose window may still overlap
	for _, a := range ans {
		kept := open[:0]
		for _, o := range open {
			if !o.Received.Before(a.Sent) {
				kept = append(kept, o)
			}
		}
		open = kept
		for _, o := range open {
			if o.Responder != a.Responder {
				out = append(out, fmt.Sprintf("%s overlaps %s", o, a))
				break
			}
		}
		open = append(open, a)
	}
	return out
}

// tenure is the time a responder certainly served under one epoch: from
// its first script's receipt to its last script's sending.
type tenure struct {
	node     string
	epoch    uint64
	from, to time.Time
}

func tenures(ans []answer) []tenure {
	type key struct {
		node  string
		epoch uint64
	}
	byKey := map[key]*tenure{}
	var order []key
	for _, a := range ans {
		if a.Kind != kindIPXE {
			continue
		}
		k := key{a.Responder, a.Epoch}
		t, ok := byKey[k]
		if !ok {
			t = &tenure{node: a.Responder, epoch: a.Epoch, from: a.Received, to: a.Sent}
			byKey[k] = t
			order = append(order, k)
		}
		if a.Received.Before(t.from) {
			t.from = a.Received
		}
		if a.Sent.After(t.to) {
			t.to = a.Sent
		}
	}
	var out []tenure
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out
}

// interleaved: an answer by another responder whose whole window lies
// inside a tenure, so both served at once.
func interleaved(ans []answer) []string {
	var out []string
	for _, t := range tenures(ans) {
		if !t.from.Before(t.to) {
			continue
		}
		for _, a := range ans {
			if a.Responder != t.node && a.Sent.After(t.from) && a.Received.Before(t.to) {
				out = append(out, fmt.Sprintf("%s inside %s's tenure of epoch %d (%s–%s)", a, t.node, t.epoch,
					t.from.Format("15:04:05.000"), t.to.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// epochOrder: a script sent after another was received never carries an
// older epoch, and no epoch is served by two responders.
func epochOrder(ans []answer) (down, reused []string) {
	var scripts []answer
	for _, a := range ans {
		if a.Kind == kindIPXE {
			scripts = append(scripts, a)
		}
	}
	byRecv := append([]answer(nil), scripts...)
	sort.SliceStable(byRecv, func(i, j int) bool { return byRecv[i].Received.Before(byRecv[j].Received) })
	var best answer // the highest epoch received so far
	i := 0
	holder := map[uint64]string{}
	for _, a := range scripts { // by Sent
		for ; i < len(byRecv) && byRecv[i].Received.Before(a.Sent); i++ {
			if byRecv[i].Epoch > best.Epoch {
				best = byRecv[i]
			}
		}
		if a.Epoch < best.Epoch {
			down = append(down, fmt.Sprintf("%s after %s", a, best))
		}
		if h, ok := holder[a.Epoch]; ok && h != a.Responder {
			reused = append(reused, fmt.Sprintf("epoch %d served by %s and %s (%s)", a.Epoch, h, a.Responder, a))
		} else if !ok {
			holder[a.Epoch] = a.Responder
		}
	}
	return down, reused
}

// afterFence: once a node fenced epoch e at time At it signs nothing of
// epoch ≤ e issued after At, sends no script of it asked after At, and
// makes no offer asked after At until it holds a newer epoch (its first
// script of one, less slack: offers carry no epoch).
func afterFence(ans []answer, fences []fenceEvent, slack time.Duration) []string {
	var out []string
	for _, f := range fences {
		reacquired := time.Time{}
		for _, a := range ans {
			if a.Responder == f.Node && a.Kind == kindIPXE && a.Epoch > f.Epoch && a.Sent.After(f.At) &&
				(reacquired.IsZero() || a.Sent.Before(reacquired)) {
				reacquired = a.Sent
			}
		}
		for _, a := range ans {
			if a.Responder != f.Node || !a.Sent.After(f.At) {
				continue
			}
			switch {
			case a.Kind == kindIPXE && a.Epoch <= f.Epoch:
				out = append(out, fmt.Sprintf("%s: %s fenced epoch %d at %s", a, f.Node, f.Epoch, f.At.Format("15:04:05.000")))
			case a.Kind == kindDHCP && (reacquired.IsZero() || a.Received.Before(reacquired.Add(-slack))):
				out = append(out, fmt.Sprintf("%s: %s fenced epoch %d at %s and held no newer one", a, f.Node, f.Epoch, f.At.Format("15:04:05.000")))
			}
		}
		for _, a := range ans {
			if a.Responder == f.Node && a.Kind == kindIPXE && a.Epoch <= f.Epoch && a.IssuedAt.After(f.At) && !a.Sent.After(f.At) {
				out = append(out, fmt.Sprintf("%s: signed after %s fenced epoch %d at %s", a, f.Node, f.Epoch, f.At.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// noResume: after each fault a script comes within bound of ResumeFrom.
func noResume(ans []answer, faults []faultWindow, bound time.Duration) []string {
	var out []string
	for _, f := range faults {
		ok := false
		for _, a := range ans {
			if a.Kind == kindIPXE && !a.Sent.Before(f.ResumeFrom) && !a.Received.After(f.ResumeFrom.Add(bound)) {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s (%s–%s): no script within %v of %s", f.Name,
				f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), bound, f.ResumeFrom.Format("15:04:05.000")))
		}
	}
	return out
}

// violationReport renders violations for a failure message.
func violationReport(vs []violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("  " + v.String() + "\n")
	}
	return b.String()
}
