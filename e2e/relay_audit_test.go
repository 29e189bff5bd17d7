package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/netlab"
	"github.com/siteboot/siteboot/internal/testpki"
)

// auditSecrets are the secret strings of the audit, random per run so
// that nothing else can hold them by chance. IPMI passwords are at most
// 16 bytes (IPMI 1.5) or 20 (2.0).
type auditSecrets struct {
	ipmiPassword, ipmiWrong, redfishPassword, redfishWrong string
	// apiKey is a secret header's value (read by reference), token a plain
	// Authorization header's bearer token.
	apiKey, token string
	// mediaToken is in the query of a virtual media URL, which the relay
	// never echoes nor logs.
	mediaToken string
}

// mediaURL is the virtual media image, with a token in its query.
func (s auditSecrets) mediaURL() string {
	return "https://images.example/boot.iso?token=" + s.mediaToken
}

func newAuditSecrets() auditSecrets {
	r := func(prefix string) string {
		b := make([]byte, 7)
		_, _ = rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
	return auditSecrets{
		ipmiPassword: r("ip"), ipmiWrong: r("iw"), redfishPassword: r("rp"), redfishWrong: r("rw"),
		apiKey: r("ak") + r("ak"), token: r("tk") + r("tk"), mediaToken: r("mt"),
	}
}

// forms are the byte strings that must appear nowhere: every secret as
// it is and base64-encoded, and the basic-auth encodings of the accounts.
func (s auditSecrets) forms() map[string]string {
	out := map[string]string{}
	add := func(name, v string) {
		out[name] = v
		out[name+" (base64)"] = base64.StdEncoding.EncodeToString([]byte(v))
		out[name+" (base64url)"] = base64.RawURLEncoding.EncodeToString([]byte(v))
	}
	add("ipmi password", s.ipmiPassword)
	add("wrong ipmi password", s.ipmiWrong)
	add("redfish password", s.redfishPassword)
	add("wrong redfish password", s.redfishWrong)
	add("secret header value", s.apiKey)
	add("authorization token", s.token)
	add("basic auth redfish", bmcUser+":"+s.redfishPassword)
	add("basic auth wrong redfish", bmcUser+":"+s.redfishWrong)
	add("basic auth ipmi", bmcUser+":"+s.ipmiPassword)
	add("media URL token", s.mediaToken)
	return out
}

// TestRelayLogsHoldNoSecret runs every relay operation through the CLI
// against a siteboot logging at debug level, with known secrets: the IPMI
// password (ipmi_sim on a lab host), a Redfish password (the test Redfish
// service over TLS on another), a secret header value read by reference
// and a plain Authorization header sent through the http proxy to an
// https target of the site spec on a third; failing operations included
// (wrong passwords, forbidden targets, a pin mismatch, a missing secret).
// No secret, nor its base64 form, may appear in siteboot's log, in what
// the CLI printed, or on the metrics page, while the target did receive
// the secret header.
func TestRelayLogsHoldNoSecret(t *testing.T) {
	netlab.Require(t, netlab.Needs{Binaries: []string{"ipmi_sim", "ipmitool"}})
	sec := newAuditSecrets()
	lab := netlab.New(t, netlab.Config{})
	boot, ipmiHost, rfHost, tgtHost := lab.AddHost("boot"), lab.AddHost("bmc"), lab.AddHost("redfish"), lab.AddHost("target")
	dir := t.TempDir()
	app := startAppliance(t, boot, applianceConfig{
		KernelURL: "http://" + tgtHost.Addr().String() + ":8081/vmlinuz", InitrdURL: "http://" + tgtHost.Addr().String() + ":8081/initrd",
		Extra: relayConfig(dir, []string{ipmiHost.Addr().String() + "/32", rfHost.Addr().String() + "/32"}, nil),
	})
	startIPMISim(t, ipmiHost, nil, sec.ipmiPassword)
	rf := startRedfish(t, rfHost, sec.redfishPassword)
	tgt := startTarget(t, tgtHost)
	// The forbidden BMC is the target's host: an IPMI datagram sent there
	// would be counted, as would a connection to its https port.
	forbiddenIPMI := countUDP(t, tgtHost, netip.AddrPortFrom(tgtHost.Addr(), 623))
	ctx, cancel := context.WithTimeout(lab.Context(), 3*time.Minute)
	defer cancel()
	spec := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf("proxyTargets:\n  - nodeId: talos-1\n    addresses: [%s]\n", tgtHost.Addr())), 0o600); err != nil {
		t.Fatal(err)
	}
	app.mustCLI(ctx, "site", "apply", spec)

	refs := auditRefs{
		ipmi:       writeCredentials(t, dir, "ipmi.json", bmcUser, sec.ipmiPassword),
		ipmiWrong:  writeCredentials(t, dir, "ipmi-wrong.json", bmcUser, sec.ipmiWrong),
		redfish:    writeCredentials(t, dir, "redfish.json", bmcUser, sec.redfishPassword),
		rfWrong:    writeCredentials(t, dir, "redfish-wrong.json", bmcUser, sec.redfishWrong),
		apiKey:     writeSecret(t, dir, "api-key", []byte(sec.apiKey)),
		missingRef: "file://" + dir + "/missing.json",
	}
	var calls []cliCall
	got := map[string]string{}
	for _, op := range bmcAuditOps(ipmiHost.Addr().String(), rf, netip.AddrPortFrom(tgtHost.Addr(), tgtPort), sec.mediaURL(), refs) {
		c := app.bmc(ctx, op.args...)
		calls = append(calls, c.cliCall)
		got[op.name] = c.code()
		if op.want != "" && c.code() != op.want {
			t.Errorf("%s: code %s, want %s\n%s", op.name, c.code(), op.want, c)
		}
	}
	for _, op := range proxyAuditOps(tgt, ipmiHost.Addr().String(), sec, refs) {
		c := app.proxy(ctx, op.args...)
		calls = append(calls, c.cliCall)
		got[op.name] = c.code()
		if c.code() != op.want {
			t.Errorf("%s: code %s, want %s\n%s", op.name, c.code(), op.want, c)
		}
	}
	t.Logf("codes: %v", got)
	tgt.checkSecretArrived(t, sec)
	// Three connections: the success, the pin mismatch, the unpinned
	// handshake; the forbidden BMC and proxy calls reached nothing.
	if n := tgt.conns.Load(); n != 3 {
		t.Errorf("connections at the target: %d, want 3", n)
	}
	if n := forbiddenIPMI.Load(); n != 0 {
		t.Errorf("IPMI datagrams at the forbidden BMC address: %d, want 0", n)
	}
	metricsText := app.rawMetrics(ctx, t)
	auditHaystacks(t, sec, refs, app.proc.Output(), metricsText, calls)
	checkOneLinePerOperation(t, app, len(calls))
}

// auditRefs are the secret references the audit passes.
type auditRefs struct {
	ipmi, ipmiWrong, redfish, rfWrong, apiKey, missingRef string
}

// auditOp is one CLI call of the audit and the code it must give ("" for
// an operation whose support depends on the driver: whatever it gives is
// audited).
type auditOp struct {
	name string
	args []string
	want string
}

// bmcAuditOps are the six operations on each driver and the failures.
// forbidden is the target's https address, outside bmc.networks.
func bmcAuditOps(ipmiAddr string, rf *redfishBMC, forbidden netip.AddrPort, mediaURL string, refs auditRefs) []auditOp {
	ipmi := func(ref string) []string {
		return []string{"--driver", "ipmi", "--address", ipmiAddr, "--credentials-ref", ref}
	}
	redfish := func(ref string, pin string) []string {
		a := []string{"--driver", "redfish", "--address", rf.addr, "--credentials-ref", ref}
		if pin != "" {
			a = append(a, "--spki-sha256", pin)
		}
		return a
	}
	wrongPin := strings.Repeat("ab", 32)
	ops := []auditOp{
		{"ipmi getPower", append(ipmi(refs.ipmi), "power.getPower"), "ok"},
		{"ipmi setPower on", append(ipmi(refs.ipmi), "power.setPower", "on"), "ok"},
		{"ipmi setBootDevice", append(ipmi(refs.ipmi), "management.setBootDevice", "pxe"), "ok"},
		{"ipmi insert", append(ipmi(refs.ipmi), "virtual-media.insert", mediaURL), ""},
		{"ipmi eject", append(ipmi(refs.ipmi), "virtual-media.eject"), ""},
		{"ipmi inspect", append(ipmi(refs.ipmi), "inspect.inspect"), ""},
		{"ipmi setPower cycle", append(ipmi(refs.ipmi), "power.setPower", "cycle"), "ok"},
		{"ipmi wrong password", append(ipmi(refs.ipmiWrong), "power.getPower"), "auth-failed"},
		{"ipmi missing secret", append(ipmi(refs.missingRef), "power.getPower"), "credentials-unavailable"},
		{"ipmi forbidden target", []string{"--driver", "ipmi", "--address", forbidden.Addr().String(), "--credentials-ref", refs.ipmi, "power.getPower"}, "forbidden-target"},
		{"redfish getPower", append(redfish(refs.redfish, ""), "power.getPower"), "ok"},
		{"redfish unknown driver option", append(redfish(refs.redfish, rf.pin), "--driver-options", `{"colour":1}`, "power.getPower"), "invalid-args"},
		{"redfish setPower on", append(redfish(refs.redfish, rf.pin), "power.setPower", "on"), "ok"},
		{"redfish setBootDevice", append(redfish(refs.redfish, rf.pin), "management.setBootDevice", "pxe"), "ok"},
		{"redfish insert", append(redfish(refs.redfish, rf.pin), "virtual-media.insert", mediaURL), "ok"},
		{"redfish eject", append(redfish(refs.redfish, rf.pin), "virtual-media.eject"), "ok"},
		{"redfish inspect", append(redfish(refs.redfish, rf.pin), "inspect.inspect"), ""},
		{"redfish setPower off", append(redfish(refs.redfish, rf.pin), "power.setPower", "off"), "ok"},
		{"redfish wrong password", append(redfish(refs.rfWrong, rf.pin), "power.getPower"), "auth-failed"},
		{"redfish pin mismatch", append(redfish(refs.redfish, wrongPin), "power.getPower"), "pin-mismatch"},
		{"redfish forbidden target", []string{"--driver", "redfish", "--address", "https://" + forbidden.String(), "--credentials-ref", refs.redfish, "power.getPower"}, "forbidden-target"},
	}
	return ops
}

// proxyAuditOps send the secret header and the Authorization header in
// every request, allowed or not.
func proxyAuditOps(tgt *target, otherAddr string, sec auditSecrets, refs auditRefs) []auditOp {
	with := func(node, url, pin, keyRef string) []string {
		a := []string{"--target-node", node, "--url", url, "--header", "Authorization: Bearer " + sec.token, "--secret-header", "X-Api-Key:" + keyRef}
		if pin != "" {
			a = append(a, "--spki-sha256", pin)
		}
		return a
	}
	wrongPin := strings.Repeat("cd", 32)
	return []auditOp{
		{"proxy success", with("talos-1", tgt.url+"/v1/version", tgt.pin, refs.apiKey), "ok"},
		{"proxy pin mismatch", with("talos-1", tgt.url+"/v1/version", wrongPin, refs.apiKey), "pin-mismatch"},
		{"proxy unpinned self-signed", with("talos-1", tgt.url+"/v1/version", "", refs.apiKey), "tls-failed"},
		{"proxy host not listed", with("talos-1", "https://"+otherAddr+"/v1/version", tgt.pin, refs.apiKey), "forbidden-target"},
		{"proxy unknown node", with("talos-9", tgt.url+"/v1/version", tgt.pin, refs.apiKey), "forbidden-target"},
		{"proxy plain http", with("talos-1", strings.Replace(tgt.url, "https://", "http://", 1)+"/v1/version", "", refs.apiKey), "forbidden-target"},
		{"proxy missing secret", with("talos-1", tgt.url+"/v1/version", tgt.pin, refs.missingRef), "credentials-unavailable"},
	}
}

// auditHaystacks fails the test for every secret form found in siteboot's
// log, the metrics page or a CLI call's output.
func auditHaystacks(t *testing.T, sec auditSecrets, refs auditRefs, log, metricsText string, calls []cliCall) {
	t.Helper()
	stacks := map[string]string{"siteboot log": log, "metrics page": metricsText}
	for i, c := range calls {
		stacks[fmt.Sprintf("call %d (%s) stdout", i, strings.Join(c.Args, " "))] = c.Stdout
		stacks[fmt.Sprintf("call %d (%s) stderr", i, strings.Join(c.Args, " "))] = c.Stderr
	}
	// The haystacks are real: the log has the relays' lines and the
	// metrics their counters.
	if !strings.Contains(metricsText, "siteboot_bmc_operations_total") || !strings.Contains(metricsText, "siteboot_httpproxy_requests_total") {
		t.Errorf("metrics page lacks the relay counters:\n%s", grepLines(metricsText, "siteboot_bmc_", "siteboot_httpproxy_"))
	}
	// And they hold what the failures say: the missing secret's name (a
	// ref is not a secret) and the codes.
	if !strings.Contains(log, refs.missingRef) {
		t.Errorf("siteboot log never names the missing secret ref %s", refs.missingRef)
	}
	for where, text := range stacks {
		for name, form := range sec.forms() {
			if strings.Contains(text, form) {
				t.Errorf("%s holds the %s:\n%s", where, name, grepLines(text, form))
			}
		}
	}
	t.Logf("audited %d byte strings in %d haystacks (%d bytes of siteboot log)", len(sec.forms()), len(stacks), len(log))
}

// relayLogMessages are the lines the relays log, one per operation or
// request.
var relayLogMessages = []string{"bmc operation", "bmc operation failed", "httpproxy request"}

// checkOneLinePerOperation: siteboot logged one relay line per call.
func checkOneLinePerOperation(t *testing.T, app *appliance, calls int) {
	t.Helper()
	n := 0
	for _, l := range app.logs() {
		if slices.Contains(relayLogMessages, l.str("msg")) {
			n++
		}
	}
	if n != calls {
		t.Errorf("siteboot logged %d relay lines %q for %d relay calls, want one each", n, relayLogMessages, calls)
	}
}

// grepLines returns the lines of text holding any of subs (at most 10).
func grepLines(text string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		for _, s := range subs {
			if strings.Contains(line, s) && len(out) < 10 {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// rawMetrics is the text of siteboot's /metrics page.
func (a *appliance) rawMetrics(ctx context.Context, t *testing.T) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %s %v", resp.Status, err)
	}
	return string(body)
}

// target is an https server on a lab host, the API of proxy target
// talos-1, with a self-signed certificate; it records the headers of what
// reached it.
type target struct {
	url   string
	pin   string // SPKI SHA-256 of its certificate, hex
	conns atomic.Int64

	mu      sync.Mutex
	headers []http.Header
}

// tgtPort is the proxy target's https port.
const tgtPort = 8443

// startTarget serves on h's address, port tgtPort, until the test ends.
func startTarget(t *testing.T, h *netlab.Host) *target {
	t.Helper()
	kp := testpki.NewCA(t, "target").KeyPair(t, "talos-1", testpki.Leaf{IPs: []net.IP{h.Addr().AsSlice()}})
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pin := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	ln, err := h.Listen(h.Lab().Context(), "tcp4", netip.AddrPortFrom(h.Addr(), tgtPort).String())
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{url: "https://" + ln.Addr().String(), pin: hex.EncodeToString(pin[:])}
	srv := &http.Server{
		Handler:           tg,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12},
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				tg.conns.Add(1)
			}
		},
		ErrorLog: log.New(io.Discard, "", 0), // refused handshakes are expected
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("target server: %v", err)
		}
	})
	return tg
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tg.mu.Lock()
	tg.headers = append(tg.headers, r.Header.Clone())
	tg.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"version":"v1.9.0"}`)
}

// checkSecretArrived: exactly one request reached the target (the
// successful one), carrying the secret header's value and the plain
// Authorization header.
func (tg *target) checkSecretArrived(t *testing.T, sec auditSecrets) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var got [][2]string
	for _, h := range tg.headers {
		got = append(got, [2]string{h.Get("X-Api-Key"), h.Get("Authorization")})
	}
	want := [][2]string{{sec.apiKey, "Bearer " + sec.token}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests at the target: (X-Api-Key, Authorization) (-want +got):\n%s", diff)
	}
}
