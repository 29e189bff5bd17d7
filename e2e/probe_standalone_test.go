package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/netlab"
)

// TestProbeCatchesStandaloneDoubleAnswers: three standalone appliances on
// one LAN each hold their own lease, so the machine gets three offers to
// each DISCOVER and three scripts under three equal epochs. The probe must
// see all of them, verified, and the checker must call it a double answer:
// the negative control of the fault test, on real appliances.
func TestProbeCatchesStandaloneDoubleAnswers(t *testing.T) {
	netlab.Require(t)
	l := newLeaseLab(t, leaseLabConfig{TTL: leaseTTL})
	ctx, cancel := context.WithTimeout(l.lab.Context(), 30*time.Second)
	defer cancel()
	for _, n := range l.nodes {
		if err := n.waitEntry(ctx, l.mac, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	p := l.startProbe()
	start := time.Now()
	if _, err := p.waitScript(ctx, start); err != nil {
		t.Fatal(err)
	}
	sleep(ctx, 2*time.Second)
	p.stop()
	ans := p.snapshot()
	seen := map[string][]string{}
	for _, a := range ans {
		if a.Err != "" {
			t.Errorf("probe could not verify an answer: %s", a)
			continue
		}
		if !slices.Contains(seen[a.Kind], a.Responder) {
			seen[a.Kind] = append(seen[a.Kind], a.Responder)
		}
	}
	for _, k := range []string{kindDHCP, kindIPXE} {
		slices.Sort(seen[k])
	}
	want := map[string][]string{kindDHCP: {"nodea", "nodeb", "nodec"}, kindIPXE: {"nodea", "nodeb", "nodec"}}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("responders by kind (-want +got):\n%s\nunanswered: %s", diff, p.missReport())
	}
	vs := checkLease(checkInput{Answers: ans, ResumeBound: resumeBound(l.cfg), Slack: openSlack})
	var rules []string
	for _, v := range vs {
		if !slices.Contains(rules, v.Rule) {
			rules = append(rules, v.Rule)
		}
	}
	slices.Sort(rules)
	// Every standalone node takes epoch 1 of its own log.
	if diff := cmp.Diff([]string{ruleDouble, ruleEpochUsed, ruleInterleav}, rules); diff != "" {
		t.Errorf("rules the checker found broken (-want +got):\n%s\n%s", diff, violationReport(vs))
	}
	t.Logf("%d answers in %v; unanswered: %s", len(ans), time.Since(start).Round(time.Millisecond), p.missReport())
}
