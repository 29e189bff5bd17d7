package redfishsim

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const user, password = "admin", "pw-123"

type client struct {
	t     *testing.T
	s     *Server
	hc    *http.Client
	token string
}

func start(t *testing.T, on bool) *client {
	t.Helper()
	s, err := Start(Config{User: user, Password: password, PoweredOn: on})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	t.Cleanup(func() { tr.CloseIdleConnections(); s.Close() })
	return &client{t: t, s: s, hc: &http.Client{Transport: tr}}
}

func (c *client) call(method, path string, body any) (int, http.Header, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "https://"+c.s.Addr().String()+path, rd)
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

func (c *client) login() {
	c.t.Helper()
	st, h, _ := c.call("POST", sessions, map[string]string{"UserName": user, "Password": password})
	if st != http.StatusCreated || h.Get("X-Auth-Token") == "" || h.Get("Location") == "" {
		c.t.Fatalf("login = %d %v", st, h)
	}
	c.token = h.Get("X-Auth-Token")
}

func TestAuth(t *testing.T) {
	c := start(t, false)
	if st, _, _ := c.call("GET", root, nil); st != http.StatusOK {
		t.Fatalf("service root without auth = %d, want 200", st)
	}
	if st, _, _ := c.call("GET", system, nil); st != http.StatusUnauthorized {
		t.Fatalf("system without auth = %d, want 401", st)
	}
	if st, _, _ := c.call("POST", sessions, map[string]string{"UserName": user, "Password": "nope"}); st != http.StatusUnauthorized {
		t.Fatalf("login with a wrong password = %d, want 401", st)
	}
	c.login()
	if st, _, m := c.call("GET", system, nil); st != http.StatusOK || m["PowerState"] != "Off" {
		t.Fatalf("system = %d %v", st, m)
	}
	st, _, _ := c.call("DELETE", sessions+"/1", nil)
	if st != http.StatusNoContent || c.s.Sessions() != 0 {
		t.Fatalf("logout = %d, %d sessions left", st, c.s.Sessions())
	}
	if st, _, _ := c.call("GET", system, nil); st != http.StatusUnauthorized {
		t.Fatalf("system with a deleted session = %d, want 401", st)
	}
}

func TestResetTransitions(t *testing.T) {
	c := start(t, false)
	c.login()
	for _, step := range []struct {
		reset  string
		status int
		on     bool
	}{
		{"ForceOff", http.StatusConflict, false},
		{"GracefulShutdown", http.StatusConflict, false},
		{"ForceRestart", http.StatusConflict, false},
		{"On", http.StatusNoContent, true},
		{"On", http.StatusConflict, true},
		{"ForceRestart", http.StatusNoContent, true},
		{"GracefulShutdown", http.StatusNoContent, false},
		{"PowerCycle", http.StatusNoContent, true},
		{"ForceOff", http.StatusNoContent, false},
		{"Explode", http.StatusBadRequest, false},
	} {
		st, _, body := c.call("POST", resetPath, map[string]string{"ResetType": step.reset})
		if st != step.status || c.s.State().PowerOn != step.on {
			t.Fatalf("%s: status %d on=%v, want %d on=%v", step.reset, st, c.s.State().PowerOn, step.status, step.on)
		}
		if st >= 400 && body["error"] == nil {
			t.Errorf("%s: error without a Redfish error body", step.reset)
		}
	}
	want := []string{"On", "ForceRestart", "GracefulShutdown", "PowerCycle", "ForceOff"}
	if diff := cmp.Diff(want, c.s.State().Resets); diff != "" {
		t.Errorf("accepted resets (-want +got):\n%s", diff)
	}
}

func TestBootAndMedia(t *testing.T) {
	c := start(t, true)
	c.login()
	if st, _, _ := c.call("PATCH", system, map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Floppy2"}}); st != http.StatusBadRequest {
		t.Errorf("unknown boot target = %d, want 400", st)
	}
	if st, _, _ := c.call("PATCH", system, map[string]any{"BootOrder": []string{"x"}}); st != http.StatusBadRequest {
		t.Errorf("unknown property = %d, want 400", st)
	}
	if st, _, _ := c.call("PATCH", system, map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}); st != http.StatusNoContent {
		t.Errorf("boot pxe = %d", st)
	}
	if got := c.s.State(); got.BootTarget != "Pxe" || got.BootEnabled != "Once" || got.BootMode != "UEFI" {
		t.Errorf("boot state = %+v", got)
	}
	if st, _, _ := c.call("POST", ejectPath, map[string]any{}); st != http.StatusConflict {
		t.Errorf("eject with nothing in = %d, want 409", st)
	}
	img := map[string]any{"Image": "http://h/x.iso", "Inserted": true, "WriteProtected": true}
	if st, _, _ := c.call("POST", insertPath, img); st != http.StatusNoContent {
		t.Errorf("insert = %d", st)
	}
	if st, _, _ := c.call("POST", insertPath, img); st != http.StatusConflict {
		t.Errorf("second insert = %d, want 409", st)
	}
	if _, _, m := c.call("GET", cd, nil); m["Inserted"] != true || m["Image"] != "http://h/x.iso" {
		t.Errorf("CD = %v", m)
	}
	if st, _, _ := c.call("POST", ejectPath, map[string]any{}); st != http.StatusNoContent || c.s.State().MediaInserted {
		t.Errorf("eject = %d, state %+v", st, c.s.State())
	}
}

func TestSPKI(t *testing.T) {
	c := start(t, false)
	conn, err := tls.Dial("tcp", c.s.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
	if !bytes.Equal(sum[:], c.s.SPKISHA256()) {
		t.Error("SPKISHA256 is not the hash of the served certificate's key")
	}
	other := start(t, false)
	if bytes.Equal(other.s.SPKISHA256(), c.s.SPKISHA256()) {
		t.Error("two servers share a key")
	}
}
