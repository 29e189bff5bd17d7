package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
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
// lines, as slog's JSON handler writes them, at valid_until when the line
// carries an earlier one (a node resumed after SIGSTOP logs late), and last
// until the next gate-open line; lines without an epoch and other lease
// lines are not fences. The messages are the lease package's own, spelled
// out here: TestFenceMessagesAreTheLeases fails when lease/ renames them.
func TestCheckerReadsFenceLines(t *testing.T) {
	var buf strings.Builder
	h := slog.NewJSONHandler(&buf, nil)
	logAt := func(n int, level slog.Level, msg string, attrs ...slog.Attr) {
		r := slog.NewRecord(ms(n), level, msg, 0)
		r.AddAttrs(attrs...)
		if err := h.Handle(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	warn, info := slog.LevelWarn, slog.LevelInfo
	logAt(1000, info, "lease: epoch taken; waiting ttl + margin before answering", slog.Uint64("epoch", 3), slog.Time("opens", ms(4000)))
	logAt(1100, info, "lease: gate open", slog.Uint64("epoch", 3), slog.Duration("ttl", 2*time.Second), slog.Time("valid_until", ms(3100)))
	logAt(2100, warn, "lease: fenced: the gate is closed", slog.Uint64("epoch", 3), slog.String("reason", "leadership_lost"),
		slog.String("why", "raft leadership was lost"))
	logAt(3000, info, "lease: gate open", slog.Uint64("epoch", 4), slog.Duration("ttl", 2*time.Second), slog.Time("valid_until", ms(5000)))
	logAt(9000, warn, "lease: fenced: the window ran out without a renewal; the gate is closed", slog.Uint64("epoch", 4),
		slog.Time("valid_until", ms(5500)), slog.String("reason", "expired"))
	logAt(9500, info, "lease: gate open", slog.Uint64("epoch", 4), slog.Duration("ttl", 2*time.Second), slog.Time("valid_until", ms(11500)))
	logAt(12000, warn, "lease: fenced: the window had run out before this renewal (was the process paused?)", slog.Uint64("epoch", 4),
		slog.Time("valid_until", ms(11500)), slog.String("reason", "expired"))
	logAt(12000, info, "lease: gate open", slog.Uint64("epoch", 4), slog.Duration("ttl", 2*time.Second), slog.Time("valid_until", ms(14000)))
	logAt(16000, warn, "lease: fenced: the gate is closed", slog.Uint64("epoch", 4), slog.String("reason", "leadership_lost"),
		slog.String("why", "raft leadership could not be verified"), slog.Time("valid_until", ms(14000)))
	logAt(16500, warn, "lease: fenced: the gate is closed", slog.Uint64("epoch", 0), slog.String("reason", "leadership_lost"))
	logAt(17000, info, "lease: epoch taken", slog.Uint64("epoch", 5))
	buf.WriteString("not json\n")
	got := fenceEvents("a", parseLog(buf.String()))
	want := []fenceEvent{
		{Node: "a", Epoch: 3, At: ms(2100), Until: ms(3000)},
		{Node: "a", Epoch: 4, At: ms(5500), Until: ms(9500)},
		{Node: "a", Epoch: 4, At: ms(11500), Until: ms(12000)},
		{Node: "a", Epoch: 4, At: ms(14000)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fence events (-want +got):\n%s\nlog:\n%s", diff, buf.String())
	}
}

// TestFenceMessagesAreTheLeases: every message the checker reads as a
// fence or an opening is logged, with an epoch, by the lease package, and
// every lease log line that says "fenced" or "gate open" is one the
// checker reads; renaming one there fails here.
func TestFenceMessagesAreTheLeases(t *testing.T) {
	logged := leaseLogCalls(t, "../lease")
	for _, msg := range slices.Concat(fenceMessages, openMessages) {
		keys, ok := logged[msg]
		if !ok {
			t.Errorf("the checker reads %q, which lease/ never logs", msg)
		} else if !slices.Contains(keys, "epoch") {
			t.Errorf("lease/ logs %q without an epoch (keys %v)", msg, keys)
		}
	}
	for msg := range logged {
		if strings.Contains(msg, "fenced") && !slices.Contains(fenceMessages, msg) {
			t.Errorf("lease/ logs %q, which the checker does not read as a fence", msg)
		}
		if strings.Contains(msg, "gate open") && !slices.Contains(openMessages, msg) {
			t.Errorf("lease/ logs %q, which the checker does not read as an opening", msg)
		}
	}
	// A fence line may come late (a resumed process): each carries, at
	// least when late, the moment the gate closed.
	for _, msg := range fenceMessages {
		if keys := logged[msg]; !slices.Contains(keys, "valid_until") {
			t.Errorf("lease/ logs %q without valid_until (keys %v)", msg, keys)
		}
	}
}

// leaseLogCalls maps the constant messages of the slog calls
// (….Info/Warn/Error/Debug("msg", key, value, …)) in dir's non-test Go
// files to the constant keys the calls with that message pass.
func leaseLogCalls(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"Debug", "Info", "Warn", "Error"}, sel.Sel.Name) {
				return true
			}
			msg, ok := stringLit(call.Args[0])
			if !ok {
				return true
			}
			var keys []string
			for i := 1; i < len(call.Args); i += 2 {
				if k, ok := stringLit(call.Args[i]); ok {
					keys = append(keys, k)
				}
			}
			out[msg] = append(out[msg], keys...)
			return true
		})
	}
	return out
}

// stringLit is the value of a string literal, or of two joined with +.
func stringLit(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok := stringLit(e.X)
		b, ok2 := stringLit(e.Y)
		return a + b, ok && ok2
	}
	return "", false
}
