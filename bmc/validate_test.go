package bmc

import (
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

func TestInvalidRequestsSendNothing(t *testing.T) {
	s := startRedfish(t, false)
	addr := "https://" + s.Addr().String()
	pin := s.SPKISHA256()
	cases := []struct {
		name string
		req  *sitev1.BmcOperationRequest
		code string
		msg  string
	}{
		{"unknown driver", &sitev1.BmcOperationRequest{Driver: "IPMI", Operation: "power.getPower"}, relayerr.Unsupported, "driver"},
		{"unknown operation", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.explode"}, relayerr.Unsupported, "operation"},
		{"ipmi has no media", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "virtual-media.eject"}, relayerr.Unsupported, "ipmi cannot do virtual-media.eject"},
		{"unknown arg", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{"state":"on","force":true}`}, relayerr.InvalidArgs, `unknown key "force"`},
		{"duplicate arg", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{"state":"on","state":"off"}`}, relayerr.InvalidArgs, `duplicate key "state"`},
		{"trailing data", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{"state":"on"} {}`}, relayerr.InvalidArgs, "trailing data"},
		{"not an object", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", ArgsJson: `[]`}, relayerr.InvalidArgs, "not a JSON object"},
		{"args for getPower", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", ArgsJson: `{"state":"on"}`}, relayerr.InvalidArgs, `unknown key "state"`},
		{"missing state", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{}`}, relayerr.InvalidArgs, `"state" is required`},
		{"bad state", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{"state":"On"}`}, relayerr.InvalidArgs, `"state" must be one of`},
		{"state not string", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.setPower", ArgsJson: `{"state":1}`}, relayerr.InvalidArgs, `"state" must be a string`},
		{"bad device", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "management.setBootDevice", ArgsJson: `{"device":"usb"}`}, relayerr.InvalidArgs, `"device" must be one of`},
		{"persistent not bool", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "management.setBootDevice", ArgsJson: `{"device":"pxe","persistent":"yes"}`}, relayerr.InvalidArgs, `"persistent" must be true or false`},
		{"media no url", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "virtual-media.insert", ArgsJson: `{"kind":"CD"}`}, relayerr.InvalidArgs, `"url" is required`},
		{"media userinfo", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "virtual-media.insert", ArgsJson: `{"url":"https://u:p@h/x.iso"}`}, relayerr.InvalidArgs, `"url" must not hold userinfo`},
		{"media ftp", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "virtual-media.insert", ArgsJson: `{"url":"ftp://h/x.iso"}`}, relayerr.InvalidArgs, `"url" must be an http or https URL`},
		{"media long", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "virtual-media.insert", ArgsJson: `{"url":"https://h/` + strings.Repeat("a", 2048) + `"}`}, relayerr.InvalidArgs, `"url" is longer`},
		{"media kind", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "virtual-media.eject", ArgsJson: `{"kind":"cd"}`}, relayerr.InvalidArgs, `"kind" must be one of`},
		{"args too long", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", ArgsJson: "{" + strings.Repeat(" ", 64<<10) + "}"}, relayerr.InvalidArgs, "longer than"},
		{"unknown option", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", DriverOptionsJson: `{"useBasicAuth":true}`}, relayerr.InvalidArgs, `driver_options_json: unknown key "useBasicAuth"`},
		{"cipher for redfish", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", DriverOptionsJson: `{"cipherSuite":3}`}, relayerr.InvalidArgs, `unknown key "cipherSuite"`},
		{"cipher range", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", DriverOptionsJson: `{"cipherSuite":18}`}, relayerr.InvalidArgs, `"cipherSuite" must be an integer from 0 to 17`},
		{"port range", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", DriverOptionsJson: `{"port":0}`}, relayerr.InvalidArgs, `"port" must be an integer`},
		{"port float", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", DriverOptionsJson: `{"port":443.5}`}, relayerr.InvalidArgs, `"port" must be an integer`},
		{"pin length", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", TlsSpkiSha256: []byte{1, 2, 3}}, relayerr.InvalidArgs, "tls_spki_sha256 must be 32 bytes"},
		{"pin for ipmi", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", TlsSpkiSha256: pin}, relayerr.InvalidArgs, "redfish only"},
		{"http address", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: "http://" + s.Addr().String()}, relayerr.InvalidArgs, "only https://"},
		{"url for ipmi", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", Address: addr}, relayerr.InvalidArgs, "only redfish takes a URL"},
		{"url with path", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr + "/redfish/v1"}, relayerr.InvalidArgs, "https://HOST[:PORT]"},
		{"url userinfo", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: "https://u:p@" + s.Addr().String()}, relayerr.InvalidArgs, "https://HOST[:PORT]"},
		{"zone", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", Address: "fe80::1%eth0"}, relayerr.InvalidArgs, "zones"},
		{"decimal ipv4", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", Address: "2130706433"}, relayerr.InvalidArgs, "neither an IP address nor a DNS name"},
		{"hex ipv4", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", Address: "0x7f.1"}, relayerr.InvalidArgs, "neither an IP address nor a DNS name"},
		{"empty address", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower"}, relayerr.InvalidArgs, "address is empty"},
		{"port twice", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, DriverOptionsJson: `{"port":443}`}, relayerr.InvalidArgs, "both address and driver_options_json"},
		{"bad port", &sitev1.BmcOperationRequest{Driver: "ipmi", Operation: "power.getPower", Address: "127.0.0.1:99999"}, relayerr.InvalidArgs, "port must be 1..65535"},
		{"no ref", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr}, relayerr.CredentialsUnavailable, "credentials_ref is empty"},
		{"bad ref", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, CredentialsRef: "vault:x"}, relayerr.CredentialsUnavailable, "credentials_ref is not a valid secret reference"},
		{"missing secret", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, CredentialsRef: "env://NONE"}, relayerr.CredentialsUnavailable, `"env://NONE" cannot be read`},
		{"secret not json", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, CredentialsRef: "env://NOTJSON"}, relayerr.CredentialsUnavailable, `"env://NOTJSON" is not a JSON object`},
		{"secret extra key", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, CredentialsRef: "env://EXTRA"}, relayerr.CredentialsUnavailable, `"env://EXTRA" is not a JSON object`},
		{"secret empty password", &sitev1.BmcOperationRequest{Driver: "redfish", Operation: "power.getPower", Address: addr, CredentialsRef: "env://EMPTYPASS"}, relayerr.CredentialsUnavailable, "must both be non-empty"},
		{"nil request", nil, relayerr.InvalidArgs, "no request"},
	}
	tr := newTestRelay(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tr.do(t, tc.req)
			wantCode(t, res, tc.code, tc.msg)
			if res.GetResultJson() != "" {
				t.Errorf("a failure carries result_json %q", res.GetResultJson())
			}
		})
	}
	if n := s.Connections(); n != 0 {
		t.Fatalf("invalid requests opened %d connections to the BMC", n)
	}
	if lines := strings.Count(tr.log.String(), "\n"); lines != len(cases) {
		t.Errorf("%d log lines for %d operations:\n%s", lines, len(cases), tr.log.String())
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		driver, in, host string
		port             int
	}{
		{"ipmi", "10.0.0.5", "10.0.0.5", 0},
		{"ipmi", "10.0.0.5:6230", "10.0.0.5", 6230},
		{"ipmi", "fd00::5", "fd00::5", 0},
		{"ipmi", "[fd00::5]:623", "fd00::5", 623},
		{"ipmi", "BMC-7.Example.", "bmc-7.example", 0},
		{"redfish", "https://10.0.0.5", "10.0.0.5", 0},
		{"redfish", "HTTPS://10.0.0.5:8443/", "10.0.0.5", 8443},
		{"redfish", "https://[fd00::5]:8443", "fd00::5", 8443},
	} {
		a, err := parseAddress(tc.driver, tc.in)
		if err != nil || a.host != tc.host || a.port != tc.port {
			t.Errorf("parseAddress(%s, %q) = %q %d %v, want %q %d", tc.driver, tc.in, a.host, a.port, err, tc.host, tc.port)
		}
	}
}
