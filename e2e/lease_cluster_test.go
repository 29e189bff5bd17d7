package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/discovery"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestLeaseClusterBasics: three appliances started from three config
// files with each other's raft addresses elect one holder, which alone
// answers; an assertion from its script verifies with `siteboot assertion
// verify --keys` against /v1/keys and fails when altered or held to a
// higher epoch; a write through a follower lands on all three; kill -9 of
// the holder moves the lease to another node with no double answer.
func TestLeaseClusterBasics(t *testing.T) {
	netlab.Require(t)
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
	l.checkAssertionCLI(ctx, t, holder)

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

// checkLeaseStatus: `siteboot lease status -o json` (protojson of
// LeaseStatus) on every node reports cluster mode, the same epoch and
// holder, and the three voters with one leader and the node id and kid
// each published; only the holder is active, with a window ahead of it;
// the others say why they are fenced.
func (l *leaseLab) checkLeaseStatus(ctx context.Context, t *testing.T, holder *leaseNode) {
	t.Helper()
	kids := map[string]string{} // node id → kid of its node.key
	for _, n := range l.nodes {
		kid, err := discovery.KeyID(n.publicKey())
		if err != nil {
			t.Fatal(err)
		}
		kids[n.name] = kid
	}
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
		if n == holder {
			if vu := st.GetValidUntil(); vu == nil || !vu.AsTime().After(time.Now().Add(-time.Second)) || st.GetRaftState() != "Leader" {
				t.Errorf("holder %s: valid_until %v, raft state %q; want a window not long over, Leader", n.name, vu.AsTime(), st.GetRaftState())
			}
		} else if st.GetFencedReason() == "" || st.GetLeader() != holder.raft {
			t.Errorf("follower %s: fenced reason %q, leader %q; want a reason, %s", n.name, st.GetFencedReason(), st.GetLeader(), holder.raft)
		}
		var got []string
		for _, m := range st.GetMembers() {
			got = append(got, fmt.Sprintf("%s %s leader=%t %s", m.GetAddress(), m.GetNodeId(), m.GetLeader(), m.GetKeyId()))
		}
		slices.Sort(got)
		var want []string
		for _, o := range l.nodes {
			want = append(want, fmt.Sprintf("%s %s leader=%t %s", o.raft, o.name, o == holder, kids[o.name]))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: lease status members (-want +got):\n%s", n.name, diff)
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

// checkAssertionCLI is what anyone outside the site can do: take the
// assertion from a script the holder serves and check it with `siteboot
// assertion verify --keys http://<appliance>/v1/keys`, from the probe's
// host, against the holder's and a follower's key set (the holder's key
// reached the follower through the raft log). It verifies as it is, and
// fails after one changed character and with --min-epoch above its epoch.
func (l *leaseLab) checkAssertionCLI(ctx context.Context, t *testing.T, holder *leaseNode) {
	t.Helper()
	text, err := l.servedAssertion(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := discovery.KeyID(holder.publicKey())
	if err != nil {
		t.Fatal(err)
	}
	follower := l.nodes[(l.index(holder)+2)%3]
	for _, from := range []*leaseNode{holder, follower} {
		keys := from.base + "/v1/keys"
		out, stderr, err := l.verifyCLI(ctx, text, "--keys", keys, "-o", "json")
		if err != nil {
			t.Errorf("assertion verify --keys %s (%s's keys) of %s's assertion: %v\n%s%s", keys, from.name, holder.name, err, out, stderr)
			continue
		}
		var resp sitebootv1.VerifyAssertionResponse
		if err := protojson.Unmarshal(out, &resp); err != nil {
			t.Fatalf("assertion verify -o json: %v\n%s", err, out)
		}
		a := resp.GetAssertion()
		if !resp.GetValid() || resp.GetKeyId() != kid || a.GetSiteAgentNodeId() != holder.name || a.GetBootLeaseEpoch() == 0 {
			t.Errorf("assertion verify --keys %s: valid %t kid %q signer %q epoch %d; want valid, %s, %s, an epoch", keys,
				resp.GetValid(), resp.GetKeyId(), a.GetSiteAgentNodeId(), a.GetBootLeaseEpoch(), kid, holder.name)
			continue
		}
		epoch := a.GetBootLeaseEpoch()
		if _, _, err := l.verifyCLI(ctx, text, "--keys", keys, "--min-epoch", fmt.Sprint(epoch)); err != nil {
			t.Errorf("assertion verify --min-epoch %d (its own epoch): %v", epoch, err)
		}
		out, stderr, err = l.verifyCLI(ctx, text, "--keys", keys, "--min-epoch", fmt.Sprint(epoch+1))
		if !isExit(err) || !strings.Contains(string(out), discovery.ReasonStaleEpoch) {
			t.Errorf("assertion verify --min-epoch %d of an epoch-%d assertion: %v, want exit status 1 and %s:\n%s%s",
				epoch+1, epoch, err, discovery.ReasonStaleEpoch, out, stderr)
		}
	}
	t.Logf("assertion verify --keys: %s's assertion verified with %s's and %s's /v1/keys; a higher --min-epoch refused", holder.name, holder.name, follower.name)
	// One changed character, in the signed body and at the signature's end.
	for _, i := range []int{len(text) / 3, len(text) - 2} {
		changed := []byte(text)
		changed[i] = otherB64(changed[i])
		out, stderr, err := l.verifyCLI(ctx, string(changed), "--keys", holder.base+"/v1/keys")
		if !isExit(err) || !strings.Contains(string(out), "NO: ") {
			t.Errorf("assertion verify of the assertion with character %d changed (%q → %q): %v, want exit status 1 and not valid:\n%s%s",
				i, text[i], changed[i], err, out, stderr)
		}
	}
}

// servedAssertion fetches the probe machine's script from n, as the probe
// host, and returns its bc.assertion= text.
func (l *leaseLab) servedAssertion(ctx context.Context, n *leaseNode) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialIn(l.probe)}}
	defer client.CloseIdleConnections()
	url := n.base + "/ipxe?mac=" + l.mac + "&buildarch=i386&platform=pcbios"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s %v\n%s", url, resp.Status, err, body)
	}
	text, ok := assertionText(string(body))
	if !ok {
		return "", fmt.Errorf("GET %s: no bc.assertion= in\n%s", url, body)
	}
	return text, nil
}

// verifyCLI runs `siteboot assertion verify ARGS FILE` on the probe's host
// with FILE holding text; it returns stdout, stderr and the exit error.
func (l *leaseLab) verifyCLI(ctx context.Context, text string, args ...string) (stdout, stderr []byte, err error) {
	f, err := os.CreateTemp(l.lab.Dir(), "assertion-*.txt")
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(text + "\n"); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := f.Close(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	argv := append([]string{"netns", "exec", l.probe.NS(), sitebootBinary(l.t), "assertion", "verify"}, args...)
	cmd := exec.CommandContext(ctx, "ip", append(argv, filepath.Base(f.Name()))...)
	cmd.Dir = l.lab.Dir()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return []byte(out.String()), []byte(errb.String()), err
}

// isExit reports whether err is the command's exit status 1 (the CLI's
// "not valid"), not a failure to run it.
func isExit(err error) bool {
	ee, ok := err.(*exec.ExitError)
	return ok && ee.ExitCode() == 1
}

// otherB64 is another base64url character than c.
func otherB64(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}
