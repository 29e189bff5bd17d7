package lease

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
)

// maxMemberKeys bounds the member keys the state holds: a cluster has 3 or
// 5 members, and replaced appliances leave theirs behind until a newer
// one takes the same node id or address.
const maxMemberKeys = 64

// maxAddressLen bounds a member's raft address.
const maxAddressLen = 255

// PublicKey is the node key one member of the site published through the
// raft log.
type PublicKey struct {
	NodeID string
	// Address is the member's raft address; empty for a single appliance
	// whose raft has no network transport.
	Address string
	// KID is the key id its signatures carry: base64url without padding of
	// SHA-256 over the key's PKIX DER.
	KID string
	Key *ecdsa.PublicKey
}

// memberKey is a validated MemberKey.
type memberKey struct {
	PublicKey
	der []byte // canonical PKIX DER
}

func (k memberKey) proto() *statev1.MemberKey {
	return &statev1.MemberKey{NodeId: k.NodeID, Address: k.Address, PublicKey: slices.Clone(k.der)}
}

// checkMemberKey validates a published key: a node id like a holder, an
// address that is empty or host:port, and a P-256 PKIX public key.
func checkMemberKey(m *statev1.MemberKey) (memberKey, error) {
	if err := checkHolder(m.GetNodeId()); err != nil {
		return memberKey{}, fmt.Errorf("member key node_id: %w", err)
	}
	if a := m.GetAddress(); a != "" {
		if err := checkAddress(a); err != nil {
			return memberKey{}, fmt.Errorf("member key of %s: address: %w", m.GetNodeId(), err)
		}
	}
	pub, der, err := parseP256(m.GetPublicKey())
	if err != nil {
		return memberKey{}, fmt.Errorf("member key of %s: public_key: %w", m.GetNodeId(), err)
	}
	return memberKey{PublicKey: PublicKey{NodeID: m.GetNodeId(), Address: m.GetAddress(), KID: keyID(der), Key: pub}, der: der}, nil
}

// checkAddress accepts a raft address: host:port, at most maxAddressLen
// bytes, the host printable ASCII, the port 1 to 65535.
func checkAddress(a string) error {
	if len(a) > maxAddressLen {
		return fmt.Errorf("%d bytes; an address has at most %d", len(a), maxAddressLen)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", a, err)
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("%q: the host is empty or not printable ASCII", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: the port is not 1 to 65535", a)
	}
	return nil
}

// parseP256 parses PKIX DER holding a P-256 key and returns it with its
// canonical encoding.
func parseP256(der []byte) (*ecdsa.PublicKey, []byte, error) {
	if len(der) == 0 {
		return nil, nil, fmt.Errorf("empty")
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, nil, fmt.Errorf("not a PKIX public key: %v", err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, nil, fmt.Errorf("a %T, not an ECDSA P-256 key", k)
	}
	canon, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pub, canon, nil
}

// keyID is the kid of a key given as PKIX DER, as the discovery signer
// computes it.
func keyID(der []byte) string {
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// memberKeys are the published keys by node id.
type memberKeys struct {
	mu   sync.Mutex
	byID map[string]memberKey
}

// put stores k in place of the key of the same node id, or of the same
// raft address (a member replaced by an appliance with a new node id).
func (m *memberKeys) put(k memberKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID == nil {
		m.byID = map[string]memberKey{}
	}
	var sameAddr []string
	for id, old := range m.byID {
		if id != k.NodeID && k.Address != "" && old.Address == k.Address {
			sameAddr = append(sameAddr, id)
		}
	}
	_, replaces := m.byID[k.NodeID]
	if !replaces && len(sameAddr) == 0 && len(m.byID) >= maxMemberKeys {
		return fmt.Errorf("member key of %s skipped: %d member keys are held, the limit", k.NodeID, maxMemberKeys)
	}
	for _, id := range sameAddr {
		delete(m.byID, id)
	}
	m.byID[k.NodeID] = k
	return nil
}

func (m *memberKeys) get(nodeID string) (memberKey, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[nodeID]
	return k, ok
}

// list returns the keys ordered by node id.
func (m *memberKeys) list() []memberKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]memberKey, 0, len(m.byID))
	for _, k := range m.byID {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b memberKey) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

func (m *memberKeys) snapshot() []*statev1.MemberKey {
	keys := m.list()
	out := make([]*statev1.MemberKey, len(keys))
	for i, k := range keys {
		out[i] = k.proto()
	}
	return out
}

// restoreKeys validates the keys of a snapshot: an invalid one, or one past
// the limit, is passed to skip and left out.
func restoreKeys(in []*statev1.MemberKey, skip func(error)) *memberKeys {
	m := &memberKeys{byID: map[string]memberKey{}}
	for _, p := range in {
		k, err := checkMemberKey(p)
		if err == nil {
			err = m.put(k)
		}
		if err != nil {
			skip(fmt.Errorf("lease: restore: %w", err))
		}
	}
	return m
}

// replace takes over the keys of o.
func (m *memberKeys) replace(o *memberKeys) {
	o.mu.Lock()
	byID := o.byID
	o.mu.Unlock()
	m.mu.Lock()
	m.byID = byID
	m.mu.Unlock()
}

// applyMemberKey stores a published key; an invalid one is skipped.
func (f *fsm) applyMemberKey(index uint64, p *statev1.MemberKey) any {
	k, err := checkMemberKey(p)
	if err == nil {
		err = f.keys.put(k)
	}
	if err != nil {
		return f.skip(index, fmt.Errorf("lease: %w", err))
	}
	return nil
}

// Keys returns the node keys the site's current members published,
// ordered by node id: the key published for the raft address of each
// server in the configuration (for a single server without a network
// transport, the key of this node id without an address). The key of a
// removed member stays in the log but is not returned, so its signatures
// no longer verify against the site's keys.
func (n *Node) Keys() []PublicKey {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	addrs := make(map[string]bool, len(servers))
	for _, s := range servers {
		addrs[string(s.Address)] = true
	}
	var out []PublicKey
	for _, k := range n.fsm.keys.list() {
		lone := len(servers) == 1 && k.Address == "" && k.NodeID == n.cfg.ID
		if addrs[k.Address] || lone {
			out = append(out, k.PublicKey)
		}
	}
	return out
}
