package e2e

// This file is the lease checker, not a test of its own: checkLease returns
// the violations it finds, and every caller fails on any
// (TestLeaseFaults, TestLeaseClusterBasics, TestBenchFailover;
// TestProbeCatchesStandaloneDoubleAnswers fails when the expected ones are
// missing). Its rules are tested in lease_check_unit_test.go, on synthetic
// runs that must pass and runs that must fail.

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

// fenceEvent is a node closing its gate, as its log says, until it opens
// it again: a holder whose window ran out while it stayed raft leader
// (its disk stalled, say) reopens under the same epoch once a renewal
// succeeds, which is safe: nobody else can have led meanwhile.
type fenceEvent struct {
	Node  string
	Epoch uint64
	// At is when the gate closed: the valid_until the node logged, else
	// the time of the log line.
	At time.Time
	// Until is the node's next "gate open" line; zero if none followed.
	Until time.Time
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
	// Slack is how long before its "gate open" line a node may already
	// answer (it logs right after opening).
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

// afterFence: between closing its gate (At) and opening it again (Until)
// a node answers nothing asked in that time and signs nothing.
func afterFence(ans []answer, fences []fenceEvent, slack time.Duration) []string {
	var out []string
	for _, f := range fences {
		closed := func(t time.Time) bool {
			return t.After(f.At) && (f.Until.IsZero() || t.Before(f.Until.Add(-slack)))
		}
		for _, a := range ans {
			if a.Responder != f.Node {
				continue
			}
			what := ""
			switch {
			case closed(a.Sent) && closed(a.Received):
				what = "answered"
			case a.Kind == kindIPXE && closed(a.IssuedAt):
				what = "signed"
			default:
				continue
			}
			reopened := "never reopened"
			if !f.Until.IsZero() {
				reopened = "reopened " + f.Until.Format("15:04:05.000")
			}
			out = append(out, fmt.Sprintf("%s: %s while fenced (epoch %d at %s, %s)", a, what, f.Epoch, f.At.Format("15:04:05.000"), reopened))
		}
	}
	return out
}

// noResume: from the last script before each fault to bound after its
// end, scripts never stop for longer than bound.
func noResume(ans []answer, faults []faultWindow, bound time.Duration) []string {
	var scripts []time.Time
	for _, a := range ans {
		if a.Kind == kindIPXE {
			scripts = append(scripts, a.Sent)
		}
	}
	sort.Slice(scripts, func(i, j int) bool { return scripts[i].Before(scripts[j]) })
	var out []string
	for _, f := range faults {
		end := f.End.Add(bound)
		prev := f.Start
		for _, s := range scripts {
			if s.Before(f.Start) {
				prev = s
			}
		}
		worst, at := time.Duration(0), prev
		for _, s := range append(scripts, end) {
			if !s.After(prev) {
				continue
			}
			if s.After(end) {
				s = end
			}
			if gap := s.Sub(prev); gap > worst {
				worst, at = gap, prev
			}
			prev = s
			if !s.Before(end) {
				break
			}
		}
		if worst > bound {
			out = append(out, fmt.Sprintf("%s (%s–%s): no script for %v after %s, over %v", f.Name,
				f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), worst.Round(time.Millisecond), at.Format("15:04:05.000"), bound))
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
