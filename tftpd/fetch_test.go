package tftpd

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pin/tftp/v3"
)

// fetched is what a client got.
type fetched struct {
	Size   int64
	SizeOK bool
	SHA256 [32]byte
}

func pinGet(addr, name string, blksize int, tsize bool) (fetched, error) {
	c, err := tftp.NewClient(addr)
	if err != nil {
		return fetched{}, err
	}
	c.SetTimeout(2 * time.Second)
	c.SetRetries(3)
	c.SetBlockSize(blksize)
	c.RequestTSize(tsize)
	wt, err := c.Receive(name, "octet")
	if err != nil {
		return fetched{}, err
	}
	var f fetched
	f.Size, f.SizeOK = wt.(tftp.IncomingTransfer).Size() // before WriteTo, which clears it
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return fetched{}, err
	}
	f.SHA256 = sha256.Sum256(buf.Bytes())
	return f, nil
}

func TestFetchWithPinClient(t *testing.T) {
	fx := start(t, Config{})
	tests := []struct {
		name    string
		file    string
		blksize int
		tsize   bool
		want    string // the file expected
		wantLog string
	}{
		{"default blksize", "ipxe.efi", 0, false, "ipxe.efi", "blksize=512"},
		{"blksize 1468", "ipxe.efi", 1468, true, "ipxe.efi", "blksize=1468"},
		{"oversized blksize is clamped", "undionly.kpxe", 65464, true, "undionly.kpxe", "blksize=1468"},
		{"blksize 1024", "undionly.kpxe", 1024, false, "undionly.kpxe", "blksize=1024"},
		{"size a multiple of the block", "exact.bin", 1468, true, "exact.bin", "blksize=1468"},
		{"one leading slash is dropped", "/arm64-efi/snponly.efi", 0, true, "arm64-efi/snponly.efi", "blksize=512"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pinGet(fx.addr, tc.file, tc.blksize, tc.tsize)
			if err != nil {
				t.Fatal(err)
			}
			data := testFiles[tc.want]
			want := fetched{SHA256: sha256.Sum256(data)}
			if tc.tsize {
				want.Size, want.SizeOK = int64(len(data)), true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fetch (-want +got):\n%s", diff)
			}
			line := fx.logs.wait("tftp transfer", fmt.Sprintf("file=%s ", tc.file), "result=ok", tc.wantLog,
				"bytes="+strconv.Itoa(len(data)))
			if len(line) == 0 {
				t.Errorf("no transfer log line with %s in:\n%s", tc.wantLog, strings.Join(fx.logs.lines("tftp transfer"), "\n"))
			}
		})
	}
}

// TestConcurrentFetches runs many transfers at once, each on its own port.
func TestConcurrentFetches(t *testing.T) {
	fx := start(t, Config{})
	const n = 25
	want := fetched{Size: int64(len(testFiles["ipxe.efi"])), SizeOK: true, SHA256: sha256.Sum256(testFiles["ipxe.efi"])}
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]fetched, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = pinGet(fx.addr, "ipxe.efi", 1468, true) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("fetch %d: %v", i, errs[i])
			continue
		}
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("fetch %d (-want +got):\n%s", i, diff)
		}
	}
}
