package e2e

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// The probe plays a booting machine that never stops asking: from its own
// lab host it broadcasts a PXE DHCPDISCOVER for the entry's MAC and asks
// every appliance for /ipxe, each every probePeriod, and records who
// answered, when, and (for scripts) under which epoch. It checks each
// script's assertion twice: against the keys the node it asked serves at
// /v1/keys (as anyone outside the site would), and against that node's
// own node.key, so a node signing with a key it does not publish, or with
// another member's key, is caught.
const (
	probePeriod = 100 * time.Millisecond
	// probeWait bounds each request: an offer later than this is not
	// matched, a script request is abandoned (a stopped appliance accepts
	// the connection and never answers).
	probeWait = time.Second
	// maxAnswers bounds the records of one run (about 4 a period).
	maxAnswers = 200_000
	// keysRefetch is how often at most the probe fetches a node's
	// /v1/keys again when an assertion names a kid it has not seen.
	keysRefetch = time.Second
)

// probe sends and records until stop.
type probe struct {
	host  *netlab.Host
	mac   net.HardwareAddr
	nodes []probeTarget
	names map[string]string // LAN address → node name
	pc    net.PacketConn

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	answers []answer
	pending map[uint32]time.Time // DISCOVER xid → sent
	misses  map[string]int       // "node status" → count, for the report
}

// probeTarget is one appliance the probe asks for scripts.
type probeTarget struct {
	name   string
	base   string
	key    func() *ecdsa.PublicKey
	served *servedKeys
}

// startProbe starts the probe on l's probe host; it stops when the test
// ends at the latest.
func (l *leaseLab) startProbe() *probe {
	l.t.Helper()
	mac, err := net.ParseMAC(l.mac)
	if err != nil {
		l.t.Fatal(err)
	}
	p := &probe{host: l.probe, mac: mac, names: l.byAddr(), pending: map[uint32]time.Time{}, misses: map[string]int{}}
	for _, n := range l.nodes {
		sk := &servedKeys{url: n.base + "/v1/keys", client: &http.Client{Timeout: probeWait,
			Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialIn(l.probe)}}}
		// Every node serves its own key from the start; fetching the set
		// now, while all run, means a node paused later still has one.
		if _, err := sk.lookup(l.lab.Context(), ""); err != nil {
			l.t.Fatalf("%s: %v", n.name, err)
		}
		p.nodes = append(p.nodes, probeTarget{name: n.name, base: n.base, key: n.publicKey, served: sk})
	}
	lc := &net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1),
				unix.BindToDevice(int(fd), netlab.Iface))
		})
		return errors.Join(err, serr)
	}}
	p.pc, err = l.probe.ListenPacket(l.lab.Context(), lc, "udp4", "0.0.0.0:68")
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(l.lab.Context())
	p.cancel = cancel
	p.wg.Add(2 + len(p.nodes))
	go p.readOffers()
	go p.sendDiscovers(ctx)
	for _, n := range p.nodes {
		go p.askScripts(ctx, n)
	}
	l.t.Cleanup(p.stop)
	return p
}

// stop ends the probe and waits for its goroutines; safe to call twice.
func (p *probe) stop() {
	p.cancel()
	p.pc.Close()
	p.wg.Wait()
}

func (p *probe) record(a answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.answers) < maxAnswers {
		p.answers = append(p.answers, a)
	}
}

func (p *probe) miss(node, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.misses[node+" "+why]++
}

// snapshot is every answer so far.
func (p *probe) snapshot() []answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]answer(nil), p.answers...)
}

// missReport lists the unanswered requests by node and reason.
func (p *probe) missReport() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for k, v := range p.misses {
		out = append(out, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// sendDiscovers broadcasts a DISCOVER every period, each with a new xid.
func (p *probe) sendDiscovers(ctx context.Context) {
	defer p.wg.Done()
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: 67}
	for xid := uint32(1); ; xid++ {
		d, err := dhcpv4.New(
			dhcpv4.WithTransactionID(dhcpv4.TransactionID{byte(xid >> 24), byte(xid >> 16), byte(xid >> 8), byte(xid)}),
			dhcpv4.WithHwAddr(p.mac), dhcpv4.WithBroadcast(true), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0}),
			dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE")),
		)
		if err == nil {
			now := time.Now()
			p.mu.Lock()
			p.pending[xid] = now
			for x, at := range p.pending {
				if now.Sub(at) > probeWait {
					delete(p.pending, x)
				}
			}
			p.mu.Unlock()
			if _, err := p.pc.WriteTo(d.ToBytes(), bcast); err != nil {
				p.miss("dhcp", "send: "+err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readOffers matches the offers to pending DISCOVERs and records them by
// server identifier. The offers are broadcast: the appliances' hosts see
// them too and ignore them.
func (p *probe) readOffers() {
	defer p.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, _, err := p.pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		got := time.Now()
		d, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || d.OpCode != dhcpv4.OpcodeBootReply || d.ClientHWAddr.String() != p.mac.String() {
			continue
		}
		x := d.TransactionID
		xid := uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])
		p.mu.Lock()
		sent, ok := p.pending[xid]
		p.mu.Unlock()
		if !ok {
			continue // late or not ours
		}
		a := answer{Kind: kindDHCP, Sent: sent, Received: got}
		sid := d.ServerIdentifier()
		if a.Responder = p.names[sid.String()]; a.Responder == "" {
			a.Responder, a.Err = sid.String(), "offer from an unknown server identifier"
		}
		p.record(a)
	}
}

// askScripts asks one appliance for the MAC's script every period.
func (p *probe) askScripts(ctx context.Context, n probeTarget) {
	defer p.wg.Done()
	client := &http.Client{Timeout: probeWait, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialIn(p.host)}}
	defer client.CloseIdleConnections()
	url := n.base + "/ipxe?mac=" + p.mac.String() + "&buildarch=i386&platform=pcbios"
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	for {
		p.askScript(ctx, client, n, url)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *probe) askScript(ctx context.Context, client *http.Client, n probeTarget, url string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			p.miss(n.name, "unanswered")
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	got := time.Now()
	if err != nil {
		p.miss(n.name, "body cut")
		return
	}
	if resp.StatusCode != http.StatusOK {
		p.miss(n.name, resp.Status)
		return
	}
	a := answer{Kind: kindIPXE, Sent: sent, Received: got, Responder: n.name}
	as, err := p.assertion(ctx, string(body), n, got)
	if err != nil {
		a.Err = err.Error()
	} else {
		a.Epoch, a.IssuedAt = as.GetBootLeaseEpoch(), as.GetIssuedAt().AsTime()
	}
	p.record(a)
}

// assertion decodes and verifies the script's bc.assertion=: with the
// keys the node serves at /v1/keys (VerifyAssertionText, as a verifier
// outside the site does, at the time it was received), and with the node's
// node.key, whose kid it must name.
func (p *probe) assertion(ctx context.Context, script string, n probeTarget, at time.Time) (*sitev1.DiscoveryAssertion, error) {
	text, ok := assertionText(script)
	if !ok {
		return nil, errors.New("script has no bc.assertion=")
	}
	sa, err := decodeAssertion(text)
	if err != nil {
		return nil, err
	}
	key := n.key()
	if key == nil {
		return nil, fmt.Errorf("no key known for %s", n.name)
	}
	kid, err := discovery.KeyID(key)
	if err != nil {
		return nil, err
	}
	if got := sa.GetSig().GetKid(); got != kid {
		return nil, fmt.Errorf("assertion served by %s names kid %q, not its node key's %q", n.name, got, kid)
	}
	a, err := discovery.VerifyAssertion(key, sa)
	if err != nil {
		return nil, fmt.Errorf("assertion served by %s does not verify with its key: %w", n.name, err)
	}
	set, err := n.served.lookup(ctx, kid)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.name, err)
	}
	if _, err := discovery.VerifyAssertionText(text, discovery.VerifyPolicy{Keys: set, Now: at}); err != nil {
		return nil, fmt.Errorf("assertion served by %s does not verify with the keys it serves at /v1/keys: %w", n.name, err)
	}
	if a.GetSiteAgentNodeId() != n.name {
		return nil, fmt.Errorf("assertion served by %s names site_agent_node_id %q", n.name, a.GetSiteAgentNodeId())
	}
	return a, nil
}

// servedKeys is the key set one appliance serves at /v1/keys, as last
// fetched.
type servedKeys struct {
	url    string
	client *http.Client

	mu  sync.Mutex
	set *discovery.KeySet
	at  time.Time // of the last fetch
}

// lookup returns the served set, fetched again first when it lacks kid
// ("" fetches unless a set is known) and the last fetch is keysRefetch
// old. The set returned may still lack kid; the verifier says so.
func (k *servedKeys) lookup(ctx context.Context, kid string) (*discovery.KeySet, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.set != nil {
		if _, ok := k.set.Lookup(kid); ok || kid == "" || time.Since(k.at) < keysRefetch {
			return k.set, nil
		}
	}
	k.at = time.Now()
	set, err := k.fetch(ctx)
	if err != nil {
		if k.set != nil {
			return k.set, nil
		}
		return nil, err
	}
	k.set = set
	return set, nil
}

func (k *servedKeys) fetch(ctx context.Context) (*discovery.KeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", k.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, discovery.MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", k.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", k.url, resp.Status)
	}
	set, err := discovery.ParseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", k.url, err)
	}
	return set, nil
}

// assertionText is the value of bc.assertion= in a script.
func assertionText(script string) (string, bool) {
	const key = "bc.assertion="
	i := strings.Index(script, key)
	if i < 0 {
		return "", false
	}
	v := script[i+len(key):]
	if j := strings.IndexAny(v, " \n\t\""); j >= 0 {
		v = v[:j]
	}
	return v, v != ""
}

// decodeAssertion parses the text after bc.assertion=: unpadded base64url
// of a serialized SignedDiscoveryAssertion.
func decodeAssertion(text string) (*sitev1.SignedDiscoveryAssertion, error) {
	wire, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("bc.assertion is not base64url: %w", err)
	}
	sa := &sitev1.SignedDiscoveryAssertion{}
	if err := proto.Unmarshal(wire, sa); err != nil {
		return nil, fmt.Errorf("bc.assertion does not decode: %w", err)
	}
	return sa, nil
}

// waitScript waits until some node served a valid script asked at or
// after since, and returns the first such script.
func (p *probe) waitScript(ctx context.Context, since time.Time) (answer, error) {
	return p.wait(ctx, since, false)
}

// latestScript is waitScript's latest such script.
func (p *probe) latestScript(ctx context.Context, since time.Time) (answer, error) {
	return p.wait(ctx, since, true)
}

func (p *probe) wait(ctx context.Context, since time.Time, latest bool) (answer, error) {
	for {
		var found answer
		for _, a := range p.snapshot() {
			if a.Kind == kindIPXE && a.Err == "" && !a.Sent.Before(since) {
				if found.Sent.IsZero() || latest {
					found = a
				}
			}
		}
		if !found.Sent.IsZero() {
			return found, nil
		}
		select {
		case <-ctx.Done():
			return answer{}, fmt.Errorf("no script asked after %s: %w (unanswered: %s)", since.Format("15:04:05.000"), ctx.Err(), p.missReport())
		case <-time.After(probePeriod):
		}
	}
}

// responders counts the valid answers per node asked at or after since.
func (p *probe) responders(since time.Time) map[string]int {
	out := map[string]int{}
	for _, a := range p.snapshot() {
		if a.Err == "" && !a.Sent.Before(since) {
			out[a.Responder]++
		}
	}
	return out
}

// longestGap is the longest time between two valid scripts asked at or
// after since (and from the last one before since).
func (p *probe) longestGap(since time.Time) time.Duration {
	var sent []time.Time
	for _, a := range p.snapshot() {
		if a.Kind == kindIPXE && a.Err == "" {
			sent = append(sent, a.Sent)
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].Before(sent[j]) })
	var worst time.Duration
	for i := 1; i < len(sent); i++ {
		if sent[i].Before(since) {
			continue
		}
		worst = max(worst, sent[i].Sub(sent[i-1]))
	}
	return worst
}
