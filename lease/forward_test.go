package lease

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
)

// member is one voter of a test cluster.
type member struct {
	addr  string
	node  *Node
	state *site.State
	store *site.Store
	key   *ecdsa.PrivateKey
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln := listenLoopback(t)
	defer ln.Close()
	return ln.Addr().String()
}

func newKey(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return k, der
}

// openMember opens a cluster-mode node on a free loopback port (plain
// TCP), its server id its address, and runs its lease loop until the test
// ends.
func openMember(t *testing.T, addr string, bootstrap bool, join []string) *member {
	t.Helper()
	return openMemberTLS(t, addr, bootstrap, join, nil)
}

// openMemberTLS is openMember with mutual TLS from ca (plain TCP if nil).
func openMemberTLS(t *testing.T, addr string, bootstrap bool, join []string, ca *testCA) *member {
	t.Helper()
	var files TLSFiles
	if ca != nil {
		files = ca.files(t, addr, leafOpts{})
	}
	key, der := newKey(t)
	st := site.NewState()
	n, err := open(Config{Mode: Cluster, Dir: t.TempDir(), ID: addr, Bind: addr, Advertise: addr, Join: join,
		PublicKey: der, StateMachine: st, TLS: files, Logger: quietLog(),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond}, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run %s: %v", addr, err)
		}
		if err := n.Close(); err != nil {
			t.Errorf("Close %s: %v", addr, err)
		}
	})
	m := &member{addr: addr, node: n, state: st, key: key}
	m.store = site.NewStore(site.StoreConfig{State: st, Applier: n, Now: time.Now, Limits: site.Limits{DefaultTTL: time.Hour}, Logger: quietLog()})
	return m
}

// startCluster starts a cluster of size voters, each given the others'
// addresses as Join: the first bootstraps, the others wait, and the leader
// adds with AddVoter whoever its configuration lacks (all of them when
// the first bootstrapped alone).
func startMembers(t *testing.T, size int) []*member {
	t.Helper()
	return startClusterTLS(t, size, nil)
}

func startClusterTLS(t *testing.T, size int, ca *testCA) []*member {
	t.Helper()
	addrs := freeAddrs(t, size)
	var ms []*member
	for i, addr := range addrs {
		join := slices.Delete(slices.Clone(addrs), i, i+1)
		ms = append(ms, openMemberTLS(t, addr, i == 0, join, ca))
	}
	leader, _ := leaderOf(t, ms)
	for _, m := range ms {
		if slices.ContainsFunc(leader.node.Members(), func(x Member) bool { return x.Address == m.addr }) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := leader.node.AddVoter(ctx, m.addr)
		cancel()
		if err != nil {
			t.Fatalf("AddVoter %s: %v", m.addr, err)
		}
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(m.node.Members()) == size })
	}
	return ms
}

func leaderOf(t *testing.T, ms []*member) (leader *member, followers []*member) {
	t.Helper()
	waitFor(t, func() bool {
		leader, followers = nil, nil
		for _, m := range ms {
			if m.node.raft.State() == raft.Leader {
				leader = m
			} else {
				followers = append(followers, m)
			}
		}
		return leader != nil
	})
	return leader, followers
}

// TestWriteThroughFollower: a site write on a follower is committed by the
// leader and lands on every member; the follower answers with its own
// state machine's result, the same as the leader's, refusals included.
func TestWriteThroughFollower(t *testing.T) {
	ms := startMembers(t, 3)
	leader, followers := leaderOf(t, ms)
	f := followers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := f.store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}})
	if err != nil {
		t.Fatalf("PrepareRamdisk on a follower: %v", err)
	}
	if len(stored) != 1 || stored[0].GetEntry().GetMac() != "52:54:00:00:00:01" {
		t.Fatalf("the follower returned %v; want the stored entry", stored)
	}
	// The result was read after the follower applied it: its state has it now.
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01"}, listed(f.state)); diff != "" {
		t.Fatalf("follower state right after the write (-want +got):\n%s", diff)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}

	// A command the state machine refuses: the same error on both.
	bad, err := proto.Marshal(&statev1.SiteCommand{Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n2"}}})
	if err != nil {
		t.Fatal(err)
	}
	resF, err := f.node.ApplySite(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	resL, err := leader.node.ApplySite(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	ef, okF := resF.(error)
	el, okL := resL.(error)
	if !okF || !okL || ef.Error() != el.Error() {
		t.Fatalf("refused command: follower %v, leader %v; want the same error", resF, resL)
	}
}

// TestNoLeaderIsNotLeaderError: a node that knows no leader refuses a
// write with a *NotLeaderError instead of waiting.
func TestNoLeaderIsNotLeaderError(t *testing.T) {
	// Never added, and its peers never run: no leader, ever.
	// Three addresses held at once: one after another, a closed port can
	// come back and the "peers" collapse into fewer voters.
	addrs := freeAddrs(t, 3)
	lone := openMember(t, addrs[0], false, addrs[1:])
	_, err := lone.node.ApplySite(context.Background(), []byte{})
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != "" {
		t.Fatalf("ApplySite with no leader = %v; want a *NotLeaderError naming none", err)
	}
	if err := lone.node.AddVoter(context.Background(), "127.0.0.1:1"); !errors.As(err, &nl) {
		t.Fatalf("AddVoter with no leader = %v; want a *NotLeaderError", err)
	}
}

// fakeLeader answers every forward request with resp, counting them.
// TestWriteThroughFollowerOverTLS: forwarding rides the raft port's mutual
// TLS; a client with a certificate of another CA gets no forward
// connection, and raft on the same port is unaffected.
func TestWriteThroughFollowerOverTLS(t *testing.T) {
	ca := newTestCA(t, "site ca")
	ms := startClusterTLS(t, 3, ca)
	leader, followers := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := followers[0].store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}}); err != nil {
		t.Fatalf("write through a follower over TLS: %v", err)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}

	foreign := newTestCA(t, "another ca").keyPair(t, "impostor", leafOpts{})
	conf := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{foreign}}
	c, err := tls.Dial("tcp", leader.addr, conf)
	if err == nil {
		defer c.Close()
		body, _ := forwardRequest{op: opApply, timeout: time.Second, payload: []byte{0xff}}.encode()
		_, _ = c.Write(append([]byte(forwardMagic), body...))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := readResponse(c); err == nil {
			t.Fatalf("a peer of another CA got a forward response %+v", resp)
		}
	}
	waitFor(t, func() bool { return refusedCount(leader.node, reasonUnknownAuthority) == 1 })
}

// TestWriteAfterLeadershipMoves: after the leader hands over, the former
// leader forwards to the new one, and the new leader's own writes work.
func TestWriteAfterLeadershipMoves(t *testing.T) {
	ms := startMembers(t, 3)
	old, _ := leaderOf(t, ms)
	if err := old.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	waitFor(t, func() bool {
		addr, _ := old.node.raft.LeaderWithID()
		return old.node.raft.State() == raft.Follower && addr != "" && string(addr) != old.addr
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := old.store.PrepareRamdisk(ctx, "n1", []*sitev1.ProxyDhcpEntry{{Mac: "52:54:00:00:00:01"}}); err != nil {
		t.Fatalf("write through the former leader: %v", err)
	}
	if got := listed(old.state); len(got) != 1 {
		t.Fatalf("the former leader's state right after its write: %v", got)
	}
	for _, m := range ms {
		waitFor(t, func() bool { return len(listed(m.state)) == 1 })
	}
}
