package images

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"ipxe.efi": amd64EFI, "arm64-efi/snponly.efi": arm64EFI})
	s, _ := load(t, dir, Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	sum := digest(amd64EFI)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	full := strconv.Itoa(len(amd64EFI))

	type result struct {
		Status  int
		Headers map[string]string
		Body    string
	}
	tests := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		want    result
	}{
		{"get", "GET", "/boot/ipxe.efi", nil, result{200, map[string]string{
			"Content-Type": "application/octet-stream", "Content-Length": full, "Etag": etag, "Accept-Ranges": "bytes"},
			string(amd64EFI)}},
		{"get in a subdirectory", "GET", "/boot/arm64-efi/snponly.efi", nil, result{200, map[string]string{
			"Content-Type": "application/octet-stream", "Content-Length": strconv.Itoa(len(arm64EFI))},
			string(arm64EFI)}},
		{"head", "HEAD", "/boot/ipxe.efi", nil, result{200, map[string]string{
			"Content-Type": "application/octet-stream", "Content-Length": full, "Etag": etag}, ""}},
		{"range", "GET", "/boot/ipxe.efi", map[string]string{"Range": "bytes=512-1023"}, result{206, map[string]string{
			"Content-Length": "512", "Content-Range": "bytes 512-1023/" + full, "Etag": etag},
			string(amd64EFI[512:1024])}},
		{"suffix range", "GET", "/boot/ipxe.efi", map[string]string{"Range": "bytes=-10"}, result{206, map[string]string{
			"Content-Length": "10"}, string(amd64EFI[len(amd64EFI)-10:])}},
		{"unsatisfiable range", "GET", "/boot/ipxe.efi", map[string]string{"Range": "bytes=99999999-"}, result{416, nil, ""}},
		{"if-none-match", "GET", "/boot/ipxe.efi", map[string]string{"If-None-Match": etag}, result{304, map[string]string{"Etag": etag}, ""}},
		{"unknown", "GET", "/boot/undionly.kpxe", nil, result{404, nil, ""}},
		{"outside prefix", "GET", "/ipxe.efi", nil, result{404, nil, ""}},
		{"backslash", "GET", "/boot/arm64-efi%5Csnponly.efi", nil, result{400, nil, ""}},
		{"encoded dotdot", "GET", "/boot/arm64-efi/%2e%2e/ipxe.efi", nil, result{400, nil, ""}},
		{"nul", "GET", "/boot/ipxe.efi%00", nil, result{400, nil, ""}},
		{"post", "POST", "/boot/ipxe.efi", nil, result{405, map[string]string{"Allow": "GET, HEAD"}, ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			got := result{Status: resp.StatusCode, Headers: map[string]string{}}
			for k := range tc.want.Headers {
				got.Headers[k] = resp.Header.Get(k)
			}
			if resp.StatusCode < 300 {
				got.Body = string(body)
			}
			if tc.want.Headers == nil {
				tc.want.Headers = map[string]string{}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
		})
	}
}
