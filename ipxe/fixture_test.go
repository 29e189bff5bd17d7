package ipxe

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/discovery"
	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

const (
	testBase    = "http://10.0.0.2:8080"
	testSite    = "site-a"
	testNode    = "appliance-1"
	testToken   = "tok en+/=$%{x}\nline2" // hostile on purpose: must be encoded
	macRamdisk  = "52:54:00:00:00:01"
	macSanboot  = "52:54:00:00:00:02"
	macChain    = "52:54:00:00:00:03"
	macUnknown  = "52:54:00:00:00:09"
	uuidRamdisk = "8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2b"
	kernelHex   = "1111111111111111111111111111111111111111111111111111111111111111"
	isoHex      = "2222222222222222222222222222222222222222222222222222222222222222"
)

// ramdiskQuery asks for macRamdisk's script with the UUID its entry pins.
const ramdiskQuery = "mac=" + macRamdisk + "&uuid=" + uuidRamdisk

// testGate is the boot lease gate: a two-value interface the tests flip at
// exact points (lease.Node needs a raft cluster to do that).
type testGate struct {
	mu    sync.Mutex
	epoch uint64
	open  bool
}

func (g *testGate) Gate() (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch, g.open
}

func (g *testGate) set(epoch uint64, open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch, g.open = epoch, open
}

// countingSigner counts the assertions the wrapped Signer signs.
type countingSigner struct {
	Signer
	n atomic.Int32
}

func (c *countingSigner) SignAssertion(a *sitev1.DiscoveryAssertion) (*sitev1.SignedDiscoveryAssertion, error) {
	c.n.Add(1)
	return c.Signer.SignAssertion(a)
}

// countingSecrets counts resolutions and may run a hook before each.
type countingSecrets struct {
	Secrets
	n      atomic.Int32
	before func()
}

func (c *countingSecrets) Resolve(ctx context.Context, ref string) ([]byte, error) {
	c.n.Add(1)
	if c.before != nil {
		c.before()
	}
	return c.Secrets.Resolve(ctx, ref)
}

// goldenSigner signs deterministically so that golden scripts are stable:
// the real body, a fixed kid and signature bytes. Tests that check the
// signature use discovery.Signer.
type goldenSigner struct{}

func (goldenSigner) SignAssertion(a *sitev1.DiscoveryAssertion) (*sitev1.SignedDiscoveryAssertion, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	if err != nil {
		return nil, err
	}
	return &sitev1.SignedDiscoveryAssertion{
		Body: body,
		Sig:  &commonv1.Signature{Kid: "golden-kid", Sig: bytes.Repeat([]byte{0xab}, 64)},
	}, nil
}

type fixture struct {
	state   *site.State
	gate    *testGate
	ledger  *discovery.Ledger
	key     *discovery.Signer
	signer  *countingSigner
	secrets *countingSecrets
	reg     *prometheus.Registry
	logs    *bytes.Buffer
	srv     *Server
	t       testing.TB
}

// newFixture builds a Server over a real site.State (three entries), a
// real discovery ledger and signer and a real secretref.Resolver. mutate
// may change the Config before New.
func newFixture(t testing.TB, mutate func(*Config)) *fixture {
	t.Helper()
	key, err := discovery.LoadOrCreateKey(t.TempDir() + "/node.key")
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := discovery.OpenLedger(discovery.LedgerConfig{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BC_TOKEN": testToken}
	f := &fixture{
		state: site.NewState(), gate: &testGate{epoch: 7, open: true}, ledger: ledger, key: key,
		signer:  &countingSigner{Signer: key},
		secrets: &countingSecrets{Secrets: secretref.Resolver{Policy: secretref.Policy{EnvPrefix: "BC_"}, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}},
		reg:     prometheus.NewRegistry(), logs: &bytes.Buffer{}, t: t,
	}
	f.put(t, "node-1", testEntries()...)
	cfg := Config{
		SiteID: testSite, NodeID: testNode, BaseURL: testBase,
		Ramdisk: Ramdisk{
			Kernel:  "http://images.example.net/agent/vmlinuz",
			Initrd:  "sha256:" + kernelHex,
			Cmdline: "console=ttyS0,115200n8   quiet",
		},
		Now:     func() time.Time { return t0 },
		Logger:  slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: f.reg,
		Entries: f.state, Gate: f.gate, Signer: f.signer, Discovery: ledger, Secrets: f.secrets,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if f.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

func testEntries() []*sitev1.ProxyDhcpEntry {
	notAfter := timestamppb.New(t0.Add(4 * time.Hour))
	iso := bytes.Repeat([]byte{0x22}, 32)
	return []*sitev1.ProxyDhcpEntry{
		{Mac: macRamdisk, ProductUuid: uuidRamdisk, WorkflowId: "wf-42", NotAfter: notAfter, DiscoveryTokenRef: "env://BC_TOKEN"},
		// sanboot wins over ipxe_script_url.
		{Mac: macSanboot, WorkflowId: "wf-43", NotAfter: notAfter, SanbootSha256: iso, IpxeScriptUrl: "https://agent.example.net/x.ipxe", DiscoveryTokenRef: "env://BC_TOKEN"},
		{Mac: macChain, WorkflowId: "wf-44", NotAfter: notAfter, IpxeScriptUrl: "https://agent.example.net/scripts/52-54-00-00-00-03.ipxe?t=1"},
	}
}

// put stores entries in the real site state through its command path.
func (f *fixture) put(t testing.TB, node string, entries ...*sitev1.ProxyDhcpEntry) {
	t.Helper()
	data, err := proto.Marshal(&statev1.SiteCommand{
		At: timestamppb.New(t0),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: node, Entries: entries}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := f.state.ApplyCommand(data).(error); ok {
		t.Fatalf("storing entries: %v", res)
	}
}

// scripts returns siteboot_ipxe_scripts_total by kind.
func (f *fixture) scripts(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "siteboot_ipxe_scripts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				out[m.GetLabel()[0].GetValue()] = v
			}
		}
	}
	return out
}
