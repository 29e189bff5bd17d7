package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the synthetic runs' origin.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// ms is t0 plus n milliseconds.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// serve returns node's answers every 100 ms over [from, to) ms: an offer
// and a script of epoch, each answered 5 ms after it was asked.
func serve(node string, epoch uint64, from, to int) []answer {
	var out []answer
	for t := from; t < to; t += 100 {
		out = append(out,
			answer{Kind: kindDHCP, Sent: ms(t), Received: ms(t + 5), Responder: node},
			answer{Kind: kindIPXE, Sent: ms(t + 10), Received: ms(t + 15), Responder: node, Epoch: epoch, IssuedAt: ms(t + 12)})
	}
	return out
}

func concat(parts ...[]answer) []answer { return slices.Concat(parts...) }

func TestCheckerRules(t *testing.T) {
	bound := 10 * time.Second
	kill := []faultWindow{{Name: "kill a", Start: ms(2000), End: ms(2000), ResumeFrom: ms(2000)}}
	cases := []struct {
		name string
		in   checkInput
		want []string // rules broken, sorted
	}{
		{
			name: "clean handover",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 2000), serve("b", 2, 3500, 6000)),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(2050)}},
				Faults:  kill,
			},
		},
		{
			name: "handover back to the first holder under a newer epoch",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 2000), serve("b", 2, 3500, 5000),
					[]answer{{Kind: kindDHCP, Sent: ms(6450), Received: ms(6455), Responder: "a"}}, serve("a", 3, 6500, 8000)),
				Fences: []fenceEvent{{Node: "a", Epoch: 1, At: ms(2050), Until: ms(6440)}, {Node: "b", Epoch: 2, At: ms(5050)}},
				Faults: kill,
			},
		},
		{
			name: "two responders interleaved",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 2000), serve("b", 2, 1050, 1500)),
			},
			want: []string{ruleEpochDown, ruleInterleav},
		},
		{
			name: "two responders answer one broadcast",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindDHCP, Sent: ms(1000), Received: ms(1008), Responder: "b"}},
					[]answer{{Kind: kindDHCP, Sent: ms(1000), Received: ms(1003), Responder: "a"}}),
			},
			want: []string{ruleDouble},
		},
		{
			name: "three standalone holders",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), serve("b", 1, 0, 1000), serve("c", 1, 0, 1000)),
			},
			want: []string{ruleDouble, ruleEpochUsed, ruleInterleav},
		},
		{
			name: "epoch goes down",
			in: checkInput{
				Answers: concat(serve("a", 5, 0, 1000), serve("b", 4, 3000, 4000)),
			},
			want: []string{ruleEpochDown},
		},
		{
			name: "epoch reused by another node",
			in: checkInput{
				Answers: concat(serve("a", 5, 0, 1000), serve("b", 5, 3000, 4000)),
			},
			want: []string{ruleEpochUsed},
		},
		{
			name: "script after the node fenced",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindIPXE, Sent: ms(2500), Received: ms(2505), Responder: "a", Epoch: 1, IssuedAt: ms(2502)}}),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100)}},
			},
			want: []string{ruleFenced},
		},
		{
			name: "offer after the node fenced",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindDHCP, Sent: ms(2500), Received: ms(2505), Responder: "a"}}),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100)}},
				Slack:   20 * time.Millisecond,
			},
			want: []string{ruleFenced},
		},
		{
			name: "offer long before the node opened again",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindDHCP, Sent: ms(2500), Received: ms(2505), Responder: "a"}},
					serve("a", 2, 4000, 5000)),
				Fences: []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100), Until: ms(3990)}},
				Slack:  20 * time.Millisecond,
			},
			want: []string{ruleFenced},
		},
		{
			name: "same epoch reopened after a lapse",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), serve("a", 1, 3000, 4000)),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100), Until: ms(2990)}},
				Slack:   20 * time.Millisecond,
			},
		},
		{
			name: "script while lapsed",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), serve("a", 1, 2000, 2100), serve("a", 1, 3000, 4000)),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100), Until: ms(2990)}},
				Slack:   20 * time.Millisecond,
			},
			want: []string{ruleFenced},
		},
		{
			name: "asked before the fence, signed after it",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindIPXE, Sent: ms(1090), Received: ms(1400), Responder: "a", Epoch: 1, IssuedAt: ms(1300)}}),
				Fences:  []fenceEvent{{Node: "a", Epoch: 1, At: ms(1100)}},
			},
			want: []string{ruleFenced},
		},
		{
			name: "service never resumes",
			in: checkInput{
				Answers: serve("a", 1, 0, 2000),
				Faults:  kill,
			},
			want: []string{ruleNoResume},
		},
		{
			name: "service resumes too late",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 2000), serve("b", 2, 12500, 13000)),
				Faults:  kill,
			},
			want: []string{ruleNoResume},
		},
		{
			name: "unverifiable answer",
			in: checkInput{
				Answers: concat(serve("a", 1, 0, 1000), []answer{{Kind: kindIPXE, Sent: ms(1000), Received: ms(1005), Responder: "a", Err: "signed by b's key"}}),
			},
			want: []string{ruleInvalid},
		},
		{
			name: "nothing answered",
			in:   checkInput{},
			want: []string{ruleNoAnswers},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.ResumeBound = bound
			vs := checkLease(in)
			var got []string
			for _, v := range vs {
				if !slices.Contains(got, v.Rule) {
					got = append(got, v.Rule)
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rules broken (-want +got):\n%s\nviolations:\n%s", diff, violationReport(vs))
			}
		})
	}
}

// TestCheckerBoundsItsReport: a run full of double answers reports at
// most maxPerRule of them and says how many more there were.
func TestCheckerBoundsItsReport(t *testing.T) {
	vs := checkLease(checkInput{Answers: concat(serve("a", 1, 0, 5000), serve("b", 1, 0, 5000))})
	n := 0
	for _, v := range vs {
		if v.Rule == ruleDouble {
			n++
		}
	}
	if n != maxPerRule+1 {
		t.Errorf("%d %s lines, want %d (the bound and one summary):\n%s", n, ruleDouble, maxPerRule+1, violationReport(vs))
	}
}

// TestCheckerReadsFenceLines: fence events come from the lease's log
// lines, at valid_until when the line carries an earlier one (a node
// resumed after SIGSTOP logs late), and last until the next gate-open
// line; lines without an epoch and other lease lines are not fences.
func TestCheckerReadsFenceLines(t *testing.T) {
	log := strings.Join([]string{
		`{"time":"2026-12-01T12:00:02.100Z","level":"WARN","msg":"lease: raft leadership lost; gate closed","epoch":3}`,
		`{"time":"2026-12-01T12:00:03.000Z","level":"INFO","msg":"lease: gate open","epoch":4,"valid_until":"2026-12-01T12:00:05.000Z"}`,
		`{"time":"2026-12-01T12:00:09.000Z","level":"WARN","msg":"lease: window ran out; fenced","epoch":4,"valid_until":"2026-12-01T12:00:05.500Z"}`,
		`{"time":"2026-12-01T12:00:10.000Z","level":"INFO","msg":"lease: not the holder; fenced","epoch":0}`,
		`{"time":"2026-12-01T12:00:11.000Z","level":"INFO","msg":"lease: epoch taken; gate open","epoch":5}`,
		`not json`,
	}, "\n")
	got := fenceEvents("a", parseLog(log))
	want := []fenceEvent{
		{Node: "a", Epoch: 3, At: ms(2100), Until: ms(3000)},
		{Node: "a", Epoch: 4, At: ms(5500), Until: ms(11000)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fence events (-want +got):\n%s", diff)
	}
}
