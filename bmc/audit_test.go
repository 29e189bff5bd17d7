package bmc

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// TestSecretAudit runs every kind of operation, failing ones included,
// with known passwords, and checks that none of them is in a result, a
// message, a log line (debug level) or a metric; and that there is one
// log line per operation.
func TestSecretAudit(t *testing.T) {
	rf := startRedfish(t, false)
	sim, _ := startIPMI(t)
	tr := newTestRelay(t, nil)
	other := sha256.Sum256([]byte("x"))
	badPin := rfReq(rf, "env://RF", "power.getPower", "")
	badPin.TlsSpkiSha256 = other[:]

	reqs := []struct {
		req  *sitev1.BmcOperationRequest
		code string
	}{
		{rfReq(rf, "env://RF", "power.setPower", `{"state":"on"}`), ""},
		{rfReq(rf, "env://RF", "power.getPower", ""), ""},
		{rfReq(rf, "env://RF", "management.setBootDevice", `{"device":"pxe"}`), ""},
		{rfReq(rf, "env://RF", "virtual-media.insert", `{"url":"https://img.example/a.iso"}`), ""},
		{rfReq(rf, "env://RF", "virtual-media.eject", ""), ""},
		{rfReq(rf, "env://RF", "inspect.inspect", ""), ""},
		{rfReq(rf, "env://RF_WRONG", "power.getPower", ""), relayerr.AuthFailed},
		{badPin, relayerr.PinMismatch},
		{rfReq(rf, "env://NOTJSON", "power.getPower", ""), relayerr.CredentialsUnavailable},
		{rfReq(rf, "env://EXTRA", "power.getPower", ""), relayerr.CredentialsUnavailable},
		{ipmiReq(sim, "env://IPMI", "power.setPower", `{"state":"on"}`), ""},
		{ipmiReq(sim, "env://IPMI", "management.setBootDevice", `{"device":"pxe"}`), ""},
		{ipmiReq(sim, "env://IPMI", "inspect.inspect", ""), ""},
		{ipmiReq(sim, "env://IPMI_BAD", "power.getPower", ""), relayerr.AuthFailed},
		{&sitev1.BmcOperationRequest{Driver: "ipmi", Address: "10.0.0.1", CredentialsRef: "env://IPMI", Operation: "power.getPower"}, relayerr.ForbiddenTarget},
	}
	for i, r := range reqs {
		res := tr.do(t, r.req)
		if r.code == "" && !res.GetOk() {
			t.Errorf("request %d (%s %s) failed: %s %s", i, r.req.Driver, r.req.Operation, res.ErrorCode, res.Message)
		}
		if r.code != "" && res.GetErrorCode() != r.code {
			t.Errorf("request %d (%s %s) = %s %q, want %s", i, r.req.Driver, r.req.Operation, res.ErrorCode, res.Message, r.code)
		}
	}
	// auditSecrets (registered by newTestRelay) checks the log and the
	// metrics; check here that it has something to check.
	log := tr.log.String()
	if n := strings.Count(log, "\n"); n != len(reqs) {
		t.Errorf("%d log lines for %d operations:\n%s", n, len(reqs), log)
	}
	for _, user := range []string{rfUser, ipmiUser} {
		if strings.Contains(log, user) {
			t.Errorf("user name %q in the log", user)
		}
	}
	if strings.Contains(log, "img.example") {
		t.Error("media URL in the log")
	}
	auditSecrets(t, tr)
}

// A secret that breaks the credentials parser must not leak through the
// parser's error either.
func TestCredentialsErrorsHoldNoValue(t *testing.T) {
	tr := newTestRelay(t, nil)
	for _, v := range []string{wrongPass, `{"username":"` + wrongPass + `"`, `{"` + wrongPass + `":1}`, `{"password":` + wrongPass + `}`} {
		tr.secrets.m["env://X"] = v
		_, err := tr.credentials(context.Background(), "env://X")
		if err == nil || strings.Contains(err.Error(), wrongPass) {
			t.Errorf("credentials(%q) = %v", v, err)
		}
	}
}
