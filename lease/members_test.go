package lease

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMembershipThroughFollower: members, their published keys, and a
// voter removed and added again through a follower.
func TestMembershipThroughFollower(t *testing.T) {
	ms := startMembers(t, 3)
	leader, followers := leaderOf(t, ms)
	for _, m := range ms {
		waitFor(t, func() bool { return len(m.node.Keys()) == 3 })
	}
	f := followers[0]
	got := f.node.Members()
	var want []Member
	for _, m := range ms {
		want = append(want, Member{ServerID: m.addr, Address: m.addr, Suffrage: "Voter", Leader: m == leader,
			NodeID: m.addr, KeyID: keyIDOf(t, &m.key.PublicKey)})
	}
	sortMembers := func(s []Member) {
		slices.SortFunc(s, func(a, b Member) int { return strings.Compare(a.Address, b.Address) })
	}
	sortMembers(got)
	sortMembers(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Members on a follower (-want +got):\n%s", diff)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone := followers[1]
	if err := f.node.RemoveServer(ctx, gone.addr); err != nil {
		t.Fatalf("RemoveServer through a follower: %v", err)
	}
	for _, m := range []*member{leader, f} {
		waitFor(t, func() bool { return len(m.node.Members()) == 2 })
		// The removed member's key is no longer one of the site's keys.
		for _, k := range m.node.Keys() {
			if k.Address == gone.addr {
				t.Fatalf("%s still serves the key of the removed %s", m.addr, gone.addr)
			}
		}
		if n := len(m.node.Keys()); n != 2 {
			t.Fatalf("%s has %d keys after the removal; want 2", m.addr, n)
		}
	}
	if err := f.node.AddVoter(ctx, gone.addr); err != nil {
		t.Fatalf("AddVoter through a follower: %v", err)
	}
	waitFor(t, func() bool { return len(leader.node.Members()) == 3 && len(leader.node.Keys()) == 3 })

	var ae *AddressError
	for _, bad := range []string{"", "no-port", "host:0", "host:99999", " :1"} {
		if err := f.node.AddVoter(ctx, bad); !errors.As(err, &ae) {
			t.Errorf("AddVoter(%q) = %v; want an *AddressError", bad, err)
		}
	}
	if err := f.node.RemoveServer(ctx, "127.0.0.1:1"); !errors.As(err, &ae) {
		t.Errorf("RemoveServer of no member = %v; want an *AddressError", err)
	}
}

func keyIDOf(t *testing.T, pub *ecdsa.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return keyID(der)
}

// TestMembershipNeedsClusterMode: a standalone node refuses membership
// changes with ErrNotCluster and lists itself.
func TestMembershipNeedsClusterMode(t *testing.T) {
	_, der := newKey(t)
	h := startConfig(t, Config{Dir: t.TempDir(), PublicKey: der})
	defer h.close()
	for name, op := range map[string]func(context.Context, string) error{"AddVoter": h.node.AddVoter, "RemoveServer": h.node.RemoveServer} {
		if err := op(context.Background(), "127.0.0.1:7390"); !errors.Is(err, ErrNotCluster) {
			t.Errorf("%s in standalone mode = %v; want ErrNotCluster", name, err)
		}
	}
	waitFor(t, func() bool { return len(h.node.Keys()) == 1 })
	k := h.node.Keys()[0]
	if k.NodeID != "appliance-1" || k.Address != "" || k.KID != keyID(der) {
		t.Fatalf("standalone key %+v", k)
	}
	got := h.node.Members()
	if len(got) != 1 || !got[0].Leader || got[0].NodeID != "appliance-1" || got[0].KeyID != k.KID {
		t.Fatalf("standalone members %+v", got)
	}
}

// TestPlainClusterAddsOnlyLoopbackVoters: a cluster without raft TLS takes
// no voter at a site address, which it would dial in clear and trust
// unverified; the configuration is left as it was.
func TestPlainClusterAddsOnlyLoopbackVoters(t *testing.T) {
	ms := startMembers(t, 3)
	_, followers := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := followers[0].node.AddVoter(ctx, "192.0.2.9:7390")
	var ae *AddressError
	if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "TLS") {
		t.Fatalf("AddVoter of a site address without TLS = %v; want an *AddressError about TLS", err)
	}
	for _, m := range ms {
		if n := len(m.node.Members()); n != 3 {
			t.Fatalf("%s has %d members after the refused AddVoter; want 3", m.addr, n)
		}
	}
}
