package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// A secret pasted where a secret ref belongs (--secret-header
// Authorization:"Bearer …", --credentials-ref '{"username": …}') is
// refused without being repeated: not by the CLI, not in the API's
// answer to another client, not in the appliance's debug log.
func TestRelayDoesNotEchoAValueGivenAsARef(t *testing.T) {
	const secret = "hunter2-Zq8vT"
	sock, serveLog := startLoggedServe(t)
	values := []string{
		"Bearer " + secret,
		`{"username":"admin","password":"` + secret + `"}`,
		secret,
		"env://" + secret + " x",
		"file://" + secret,
	}

	api := apiClient(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range values {
		_, err := api.HttpProxy(ctx, &sitev1.HttpProxyRequest{
			TargetNodeId: "talos-1", Url: "https://10.0.0.51/", Method: "GET",
			SecretHeaders: []*sitev1.HttpProxyHeader{{Name: "Authorization", Value: v}},
		})
		if relayReason(err) != "credentials-unavailable" || strings.Contains(status.Convert(err).Message(), secret) {
			t.Errorf("HttpProxy with secret header ref %q: %v; want credentials-unavailable without the value", v, err)
		}
		res, err := api.BmcOperation(ctx, &sitev1.BmcOperationRequest{
			Driver: "ipmi", Address: "127.0.0.1", CredentialsRef: v, Operation: "power.getPower",
		})
		if err != nil || res.GetErrorCode() != "credentials-unavailable" || strings.Contains(res.GetMessage(), secret) {
			t.Errorf("BmcOperation with credentials_ref %q: %v, %v; want credentials-unavailable without the value", v, res, err)
		}
	}

	for _, args := range [][]string{
		{"proxy", "--target-node", "talos-1", "--url", "https://10.0.0.51/", "--secret-header", "Authorization:Bearer " + secret},
		{"proxy", "--target-node", "talos-1", "--url", "https://10.0.0.51/", "--secret-header", "Bearer " + secret},
		{"proxy", "--target-node", "talos-1", "--url", "https://10.0.0.51/", "--header", "Bearer " + secret},
		{"bmc", "--driver", "ipmi", "--address", "127.0.0.1", "--credentials-ref", values[1], "power.getPower"},
		{"bmc", "--driver", "ipmi", "--address", "127.0.0.1", "--credentials-ref", secret, "power.getPower"},
	} {
		out, errOut, err := runCLI(t, nil, sock, args...)
		ee, ok := errors.AsType[*exec.ExitError](err)
		if !ok || ee.ExitCode() != 1 || strings.Contains(out+errOut, secret) {
			t.Errorf("siteboot %q: %v, stdout %q, stderr %q; want exit 1 and the value not repeated", args, err, out, errOut)
		}
	}

	for _, line := range strings.Split(serveLog(), "\n") {
		if strings.Contains(line, secret) {
			t.Errorf("the value appears in the appliance's log: %s", line)
		}
	}
}

// A request is one log line of bounded size, however many headers it
// names: the admin API's 4 MiB message would otherwise fit some 50000
// header names into one line of the appliance's log.
func TestProxyLogLineIsBounded(t *testing.T) {
	sock, serveLog := startLoggedServe(t)
	api := apiClient(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	many := make([]*sitev1.HttpProxyHeader, 20000)
	for i := range many {
		many[i] = &sitev1.HttpProxyHeader{Name: "X-Header-Name-Of-Some-Length-" + strconv.Itoa(i), Value: "v"}
	}
	_, err := api.HttpProxy(ctx, &sitev1.HttpProxyRequest{TargetNodeId: "talos-1", Url: "https://10.0.0.51/", Method: "GET",
		Headers: many, SecretHeaders: many})
	if relayReason(err) != "invalid-args" {
		t.Fatalf("HttpProxy with %d headers: %v; want invalid-args", 2*len(many), err)
	}
	lines := 0
	for _, line := range strings.Split(serveLog(), "\n") {
		if !strings.Contains(line, "httpproxy request") {
			continue
		}
		lines++
		if len(line) > 16<<10 {
			t.Errorf("the request's log line is %d bytes: %.300s…", len(line), line)
		}
	}
	if lines != 1 {
		t.Errorf("%d httpproxy log lines, want 1", lines)
	}
}

// startLoggedServe starts `siteboot serve` logging at debug level, with
// bmc.networks 127.0.0.1/32; the returned function stops it and returns
// everything it logged.
func startLoggedServe(t *testing.T) (string, func() string) {
	t.Helper()
	base := t.TempDir()
	sock := filepath.Join(base, "s.sock")
	cfg := writeFile(t, base, "siteboot.yaml", "site_id: relay-test\nlog:\n  level: debug\nbmc:\n  networks: [127.0.0.1/32]\n")
	serve := serveProcess(t, "--config", cfg, "--data-dir", filepath.Join(base, "data"), "--admin-socket", sock)
	waitSocket(t, sock)
	return sock, func() string {
		_ = serve.Process.Kill()
		_ = serve.Wait()
		return serve.Stdout.(*bytes.Buffer).String()
	}
}

// apiClient is a client of the admin API on socket, for requests the CLI
// would refuse before sending them.
func apiClient(t *testing.T, socket string) sitebootv1.SiteBootClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sitebootv1.NewSiteBootClient(conn)
}
