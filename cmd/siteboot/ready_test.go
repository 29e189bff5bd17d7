package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// `siteboot serve &` followed at once by any command just works: the CLI
// waits for the socket and for the appliance to be ready, a write included,
// and a read after a restart never reports the restored entries as gone.
func TestCommandsRightAfterServe(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "siteboot.sock")
	first := serveProcess(t, "--data-dir", dir)
	if _, stderr, err := runCLI(t, nil, sock, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:51"); err != nil {
		t.Fatalf("entry add right after serve: %v: %s", err, stderr)
	}
	for restart := range 3 {
		if err := first.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = first.Wait()
		first = serveProcess(t, "--data-dir", dir)
		out, stderr, err := runCLI(t, nil, sock, "entry", "ls", "-o", "json")
		if err != nil {
			t.Fatalf("restart %d: entry ls right after serve: %v: %s", restart, err, stderr)
		}
		var got entriesJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Entries) != 1 || got.Entries[0].Entry.Mac != "52:54:00:00:00:51" {
			t.Fatalf("restart %d: entry ls right after serve = %s; want the stored entry", restart, out)
		}
	}
}

// The API itself never answers a read from a state raft has not restored:
// from the moment the socket appears after a restart, every ListEntries is
// either UNAVAILABLE saying the appliance is starting, or holds the entry.
func TestReadsWaitForRestoredState(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "siteboot.sock")
	first := serveProcess(t, "--data-dir", dir)
	waitSocket(t, sock)
	if _, stderr, err := runCLI(t, nil, sock, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:52"); err != nil {
		t.Fatalf("entry add: %v: %s", err, stderr)
	}
	for restart := range 3 {
		_ = first.Process.Signal(syscall.SIGKILL)
		_ = first.Wait()
		first = serveProcess(t, "--data-dir", dir)
		starting := pollEntries(t, sock, "52:54:00:00:00:52")
		t.Logf("restart %d: %d reads refused as starting before the first answer", restart, starting)
	}
}

// pollEntries lists entries as fast as it can until one answer succeeds,
// failing the test on an answer without mac or a refusal that is not
// "starting". It returns how many refusals it saw.
func pollEntries(t *testing.T, sock, mac string) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(connectParams))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := sitebootv1.NewSiteBootClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for refused := 0; ; refused++ {
		resp, err := api.ListEntries(ctx, &sitebootv1.ListEntriesRequest{}, grpc.WaitForReady(true))
		if err == nil {
			if len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetEntry().GetMac() != mac {
				t.Fatalf("ListEntries answered %v before the state was restored; want %s", resp.GetEntries(), mac)
			}
			return refused
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "starting") {
			t.Fatalf("ListEntries refused with %v; want UNAVAILABLE, starting", err)
		}
	}
}
