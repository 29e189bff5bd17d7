package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestLeaseClusterBasics: three appliances started from three config
// files with each other's raft addresses elect one holder, which alone
// answers; a write through a follower lands on all three; kill -9 of the
// holder moves the lease to another node with no double answer.
func TestLeaseClusterBasics(t *testing.T) {
	netlab.Require(t)
	requireCluster(t)
	l := newLeaseLab(t, leaseLabConfig{Cluster: true, TTL: leaseTTL, Margin: time.Second})
	p := l.startProbe()
	ctx := l.lab.Context()
	bound := resumeBound(l.cfg)
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	first, err := p.waitScript(wctx, time.Now())
	if err != nil {
		t.Fatalf("no holder answered: %v", err)
	}
	sleep(ctx, 3*time.Second)
	holder := l.node(first.Responder)
	if got := p.responders(first.Sent); len(got) != 1 {
		t.Errorf("answers since the first script by node: %v, want %s's only", got, holder.name)
	}
	l.checkLeaseStatus(ctx, t, holder)

	follower := l.nodes[(l.index(holder)+1)%3]
	mac := netlab.RandomMAC().String()
	if _, err := follower.cli(ctx, "entry", "add", "--node-id", "basics", "--mac", mac, "--ttl", "1h"); err != nil {
		t.Fatalf("write through follower %s: %v", follower.name, err)
	}
	for _, n := range l.nodes {
		if err := n.waitEntry(ctx, mac, 10*time.Second); err != nil {
			t.Error(err)
		}
	}

	kill := time.Now()
	if err := holder.kill9(); err != nil {
		t.Fatal(err)
	}
	dead := time.Now() // scripts asked before this may have been answered before the signal
	var next answer
	for next.Responder == "" || next.Responder == holder.name {
		wctx, cancel := context.WithTimeout(ctx, time.Until(kill.Add(bound)))
		next, err = p.waitScript(wctx, dead)
		cancel()
		if err != nil {
			t.Fatalf("no other node answered within %v of kill -9 of %s: %v", bound, holder.name, err)
		}
		if next.Responder == holder.name {
			t.Fatalf("killed %s answered: %s", holder.name, next)
		}
	}
	t.Logf("kill -9 of %s at %s: %s answered %v later (epoch %d → %d)", holder.name, kill.Format("15:04:05.000"),
		next.Responder, next.Received.Sub(kill).Round(10*time.Millisecond), first.Epoch, next.Epoch)
	if err := holder.start(); err != nil {
		t.Fatalf("restart of %s: %v", holder.name, err)
	}
	sleep(ctx, 2*time.Second)
	p.stop()
	var fences []fenceEvent
	for _, n := range l.nodes {
		fences = append(fences, fenceEvents(n.name, n.logs())...)
	}
	in := checkInput{Answers: p.snapshot(), Fences: fences, ResumeBound: bound, Slack: openSlack,
		Faults: []faultWindow{{Name: "kill -9 " + holder.name, Start: kill, End: kill, ResumeFrom: kill}}}
	if vs := checkLease(in); len(vs) > 0 {
		dir := keepLabLogs(t, l, p)
		t.Errorf("the checker found %d violations:\n%slogs and answers kept in %s", len(vs), violationReport(vs), dir)
	}
}

// checkLeaseStatus: every node reports cluster mode, the same epoch and
// holder, and three voters; only the holder is active.
// MERGE: `siteboot lease status -o json` prints LeaseStatus (check the
// command name and that -o json is protojson of sitebootv1.LeaseStatus).
func (l *leaseLab) checkLeaseStatus(ctx context.Context, t *testing.T, holder *leaseNode) {
	t.Helper()
	var epochs []uint64
	for _, n := range l.nodes {
		var st sitebootv1.LeaseStatus
		if err := n.cliJSON(ctx, &st, "lease", "status"); err != nil {
			t.Error(err)
			continue
		}
		if st.GetMode() != "cluster" || st.GetHolder() != holder.name || st.GetActive() != (n == holder) || len(st.GetMembers()) != 3 {
			t.Errorf("%s: lease status mode %q holder %q active %t members %d; want cluster, %s, %t, 3 (fenced: %q)",
				n.name, st.GetMode(), st.GetHolder(), st.GetActive(), len(st.GetMembers()), holder.name, n == holder, st.GetFencedReason())
		}
		epochs = append(epochs, st.GetEpoch())
	}
	if len(epochs) > 0 && slices.Min(epochs) != slices.Max(epochs) {
		t.Errorf("lease status epochs by node: %v, want one epoch", epochs)
	}
	var members sitebootv1.ListMembersResponse
	if err := holder.cliJSON(ctx, &members, "cluster", "members"); err != nil {
		t.Error(err)
		return
	}
	leaders := 0
	for _, m := range members.GetMembers() {
		if m.GetLeader() {
			leaders++
		}
	}
	if len(members.GetMembers()) != 3 || leaders != 1 {
		t.Errorf("cluster members: %d members, %d leaders; want 3 and 1:\n%v", len(members.GetMembers()), leaders, &members)
	}
}

// cliJSON runs a client command with -o json on the node and decodes it.
func (n *leaseNode) cliJSON(ctx context.Context, into proto.Message, args ...string) error {
	out, err := n.cli(ctx, append(args, "-o", "json")...)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, into); err != nil {
		return fmt.Errorf("%s: %v -o json: %w\n%s", n.name, args, err, out)
	}
	return nil
}

// waitEntry waits until the node lists an entry for mac.
func (n *leaseNode) waitEntry(ctx context.Context, mac string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		var resp sitebootv1.ListEntriesResponse
		err := n.cliJSON(ctx, &resp, "entry", "ls")
		if err == nil {
			for _, e := range resp.GetEntries() {
				if e.GetEntry().GetMac() == mac {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never listed the entry for %s written through another node (last error: %v)", n.name, mac, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
