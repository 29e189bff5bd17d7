package bmc

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/ipmisim"
	"github.com/siteboot/siteboot/internal/logbuf"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	ipmisim.ChassisMain()
	goleak.VerifyTestMain(m)
}

// The known secrets of the audit: no log line, result, message or metric
// may hold one of them.
const (
	ipmiUser     = "opsadmin"
	ipmiPassword = "Ipmi-S3cret-77"
	rfUser       = "rfadmin"
	rfPassword   = "Redfish-S3cret-42"
	wrongPass    = "Wrong-S3cret-13"
)

var knownSecrets = []string{ipmiPassword, rfPassword, wrongPass}

// memSecrets is a Secrets over a map of ref → value; it counts reads.
type memSecrets struct {
	mu    sync.Mutex
	m     map[string]string
	reads int
}

func (s *memSecrets) Check(ref string) error {
	if !strings.HasPrefix(ref, "env://") {
		return errors.New("bad ref")
	}
	return nil
}

func (s *memSecrets) Resolve(_ context.Context, ref string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	v, ok := s.m[ref]
	if !ok {
		return nil, errors.New("no such secret " + ref)
	}
	return []byte(v), nil
}

func newSecrets() *memSecrets {
	return &memSecrets{m: map[string]string{
		"env://IPMI":      `{"username":"` + ipmiUser + `","password":"` + ipmiPassword + `"}`,
		"env://RF":        `{"username":"` + rfUser + `","password":"` + rfPassword + `"}`,
		"env://RF_WRONG":  `{"username":"` + rfUser + `","password":"` + wrongPass + `"}`,
		"env://IPMI_BAD":  `{"username":"` + ipmiUser + `","password":"` + wrongPass + `"}`,
		"env://EXTRA":     `{"username":"u","password":"` + wrongPass + `","x":1}`,
		"env://NOTJSON":   wrongPass,
		"env://EMPTYPASS": `{"username":"u","password":""}`,
	}}
}

type testRelay struct {
	*Relay
	log     *logbuf.Buffer
	reg     *prometheus.Registry
	secrets *memSecrets
}

func newTestRelay(t *testing.T, mod func(*Config)) *testRelay {
	t.Helper()
	tr := &testRelay{log: &logbuf.Buffer{}, reg: prometheus.NewRegistry(), secrets: newSecrets()}
	cfg := Config{
		Networks:   []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Timeout:    20 * time.Second,
		Secrets:    tr.secrets,
		Logger:     slog.New(slog.NewTextHandler(tr.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: tr.reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.Relay = r
	t.Cleanup(func() { auditSecrets(t, tr) })
	return tr
}

// auditSecrets fails t when a known secret is in the log or the metrics.
func auditSecrets(t *testing.T, tr *testRelay) {
	t.Helper()
	text := tr.log.String() + metricText(t, tr.reg)
	for _, s := range knownSecrets {
		if strings.Contains(text, s) {
			t.Errorf("secret %q found in the log or metrics:\n%s", s, text)
		}
	}
}

func metricText(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString(mf.String())
	}
	return b.String()
}

// do runs req and audits its result for secrets.
func (tr *testRelay) do(t *testing.T, req *sitev1.BmcOperationRequest) *sitev1.BmcOperationResult {
	t.Helper()
	res := tr.Do(context.Background(), req)
	if res == nil {
		t.Fatal("Do returned nil")
	}
	for _, s := range knownSecrets {
		if strings.Contains(res.String(), s) {
			t.Errorf("secret %q in result %v", s, res)
		}
	}
	return res
}

func wantOK(t *testing.T, res *sitev1.BmcOperationResult, want string) {
	t.Helper()
	if !res.GetOk() || res.GetResultJson() != want {
		t.Fatalf("result = ok %v json %s code %s message %q; want ok and %s",
			res.GetOk(), res.GetResultJson(), res.GetErrorCode(), res.GetMessage(), want)
	}
}

func wantCode(t *testing.T, res *sitev1.BmcOperationResult, code, msgPart string) {
	t.Helper()
	if res.GetOk() || res.GetErrorCode() != code || !strings.Contains(res.GetMessage(), msgPart) {
		t.Fatalf("result = ok %v code %q message %q; want code %q with %q",
			res.GetOk(), res.GetErrorCode(), res.GetMessage(), code, msgPart)
	}
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is required (Debian openipmi/ipmitool): %v", name, err)
	}
}
