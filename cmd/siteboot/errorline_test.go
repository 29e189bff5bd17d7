package main

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errorLine's hints are about this client's connection. An error the
// appliance sends back can carry the same words (a follower forwarding to
// the leader over TLS, a relay it cannot reach): telling the operator to
// fix --tls-ca or to start serve would send them the wrong way.
func TestErrorLineHintsOnlyForTheClientsConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    codes.Code
		msg     string
		want    string // in the line
		notWant string // not in it
	}{
		{"forward x509", codes.Unavailable,
			`forward to leader boot-2: rpc error: code = Unavailable desc = connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`,
			"(Unavailable)", "--tls-ca"},
		{"origin x509", codes.FailedPrecondition,
			`image debian: GET https://mirror.example/x: tls: failed to verify certificate: x509: certificate signed by unknown authority`,
			"(FailedPrecondition)", "--tls-ca"},
		{"relay unreachable", codes.Unavailable,
			`relay r1 at 10.0.9.1:7391: dial tcp 10.0.9.1:7391: connect: connection refused`,
			"(Unavailable)", "siteboot serve"},
		{"relay certificate", codes.Unavailable,
			`relay r1: remote error: tls: bad certificate`,
			"(Unavailable)", "--tls-cert"},
		{"own handshake x509", codes.DeadlineExceeded,
			`latest balancer error: connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`,
			"--tls-ca", ""},
		{"own certificate refused", codes.Unavailable,
			`connection error: desc = "error reading server preface: remote error: tls: certificate required"`,
			"admin.tls.client_ca", ""},
		// TLS 1.3: the client writes before it reads the server's alert;
		// the server has closed by then, and the alert is lost to the reset.
		{"own certificate refused, reset", codes.DeadlineExceeded,
			`latest balancer error: write tcp 127.0.0.1:53418->127.0.0.1:44717: write: broken pipe`,
			"admin.tls.client_ca", ""},
		{"own socket missing", codes.Unavailable,
			`connection error: desc = "transport: Error while dialing: dial unix /x.sock: connect: no such file or directory"`,
			"siteboot serve", ""},
		{"never answered", codes.Unavailable, `connect: no appliance answered at x within 3s`, "siteboot serve", ""},
	} {
		line := errorLine(status.Error(tc.code, tc.msg))
		if !strings.Contains(line, tc.want) || (tc.notWant != "" && strings.Contains(line, tc.notWant)) {
			t.Errorf("%s: errorLine = %q; want it to hold %q and not %q", tc.name, line, tc.want, tc.notWant)
		}
	}
}
