package images

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A Range of 200,000 overlapping one-byte ranges is 800 KB of header,
// inside net/http's default MaxHeaderBytes (1 MiB), so it reaches the
// handler. It gets the file once with 200, not a multipart reply tens of
// times its size, and it costs no more than a plain GET.
func TestManyRangesGetTheWholeFile(t *testing.T) {
	big := peImage(machineAMD64, 1<<20)
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"ipxe.efi": big})
	s, _ := load(t, dir, Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct{ name, rng string }{
		{"200,000 overlapping ranges", "bytes=" + strings.Repeat("0-0,", 200_000)},
		{"two ranges in order", "bytes=0-0,10-19"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", srv.URL+"/boot/ipxe.efi", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Range", tc.rng)
			start := time.Now()
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, big) {
				t.Errorf("status %d, %d body bytes (%s); want 200 with the %d-byte file",
					resp.StatusCode, len(body), resp.Header.Get("Content-Type"), len(big))
			}
			if took > 3*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}
