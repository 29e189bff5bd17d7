package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
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
	base := t.TempDir()
	sock := filepath.Join(base, "s.sock")
	cfg := writeFile(t, base, "siteboot.yaml", "site_id: relay-test\nlog:\n  level: debug\nbmc:\n  networks: [127.0.0.1/32]\n")
	serve := serveProcess(t, "--config", cfg, "--data-dir", filepath.Join(base, "data"), "--admin-socket", sock)
	waitSocket(t, sock)
	values := []string{
		"Bearer " + secret,
		`{"username":"admin","password":"` + secret + `"}`,
		secret,
		"env://" + secret + " x",
		"file://" + secret,
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := sitebootv1.NewSiteBootClient(conn)
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

	_ = serve.Process.Kill()
	_ = serve.Wait()
	if log := serve.Stdout.(*bytes.Buffer).String(); strings.Contains(log, secret) {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("the value appears in the appliance's log: %s", line)
			}
		}
	}
}
