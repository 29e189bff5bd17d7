package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/siteboot/siteboot/appliance"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// testAppliance is a siteboot serve running in this test process.
type testAppliance struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan error
}

func testConfig(t *testing.T) Config {
	t.Helper()
	cfg := appliance.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NodeID = "appliance-test"
	cfg.SiteID = "site-test"
	cfg.HTTP.Listen = "127.0.0.1:0"
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startAppliance runs serve with cfg until the test ends and waits until it
// holds the lease.
func startAppliance(t *testing.T, cfg Config) *testAppliance {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return startApplianceLog(t, cfg, log)
}

// startApplianceLog is startAppliance logging to log.
func startApplianceLog(t *testing.T, cfg Config, log *slog.Logger) *testAppliance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &testAppliance{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- serve(ctx, cfg, log) }()
	t.Cleanup(a.stop)
	waitReady(t, cfg.Admin.Socket, a.done)
	return a
}

func (a *testAppliance) stop() {
	a.cancel()
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		panic("serve did not stop within 15 s")
	}
}

func waitReady(t *testing.T, socket string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v", err)
		default:
		}
		if st, err := getStatus(socket); err == nil && st.GetLease().GetActive() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("appliance not ready within 15 s")
}

func getStatus(socket string) (*sitebootv1.GetStatusResponse, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return sitebootv1.NewSiteBootClient(conn).GetStatus(ctx, &sitebootv1.GetStatusRequest{})
}

// cli runs the siteboot command line in-process against socket.
func cli(t *testing.T, socket string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	noEnv := func(string) (string, bool) { return "", false }
	root := newRootCmd(&out, &errb, noEnv)
	root.SetArgs(append([]string{"--socket", socket}, args...))
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func mustCLI(t *testing.T, socket string, args ...string) string {
	t.Helper()
	out, _, err := cli(t, socket, args...)
	if err != nil {
		t.Fatalf("siteboot %s: %v", strings.Join(args, " "), errorLine(err))
	}
	return out
}

// entriesJSON is the shape of `entry ls -o json` the tests read.
type entriesJSON struct {
	Entries []struct {
		NodeID string `json:"nodeId"`
		Entry  struct {
			Mac         string `json:"mac"`
			ProductUUID string `json:"productUuid"`
			Arch        string `json:"arch"`
			WorkflowID  string `json:"workflowId"`
			NotAfter    string `json:"notAfter"`
		} `json:"entry"`
		Live bool `json:"live"`
	} `json:"entries"`
}

func listJSON(t *testing.T, socket string) entriesJSON {
	t.Helper()
	var got entriesJSON
	if err := json.Unmarshal([]byte(mustCLI(t, socket, "entry", "ls", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("condition not met within 10 s")
}
