package images

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"
)

// A client asking for boot files in a loop cannot write a log line at Info
// per request: one line per client and file, the rest at Debug (issue 15:
// one line per machine and boot stage).
func TestServedLinesAreLimitedPerClient(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"ipxe.efi": amd64EFI, "snp.efi": amd64EFI})
	s, lb := load(t, dir, Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	const requests = 50
	for i := range requests {
		name := "ipxe.efi"
		if i%2 == 1 {
			name = "snp.efi"
		}
		resp, err := client.Get(srv.URL + "/boot/" + name)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// The line follows the answer: wait for the last one.
	all := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if all = len(lb.Lines("served boot file")); all == requests {
			break
		}
	}
	info := len(lb.Lines("level=INFO", "served boot file"))
	if all != requests || info != 2 {
		t.Errorf("%d requests for 2 files: %d lines at Info of %d in all; want 2 at Info, the rest at Debug",
			requests, info, all)
	}
}
