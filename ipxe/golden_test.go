package ipxe

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// TestGolden renders every script kind through the real handler and
// compares it with testdata/<name>.ipxe (go test -update rewrites them).
func TestGolden(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Signer = goldenSigner{} })
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	tests := []struct {
		name, path string
	}{
		{"bootstrap", "/boot.ipxe"},
		{"ramdisk", "/ipxe?mac=52-54-00-00-00-01&uuid=8F0C1B2A3D4E4F508A6B7C8D9E0F1A2B&buildarch=x86_64&platform=efi&serial=SN%20123&asset="},
		{"sanboot", "/ipxe?mac=" + macSanboot + "&buildarch=i386&platform=pcbios"},
		{"chain", "/ipxe?mac=" + macChain},
		{"unknown", "/ipxe?mac=" + macUnknown + "&buildarch=arm64&platform=efi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(ts.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			checkGolden(t, tt.name, string(body))
		})
	}
}

// TestGoldenSanbootMultipath: several appliances make one multipath line.
func TestGoldenSanbootMultipath(t *testing.T) {
	got := sanbootScript([]string{"http://10.0.0.2:8080", "http://10.0.0.3:8080"}, isoHex, 30*time.Second)
	checkGolden(t, "sanboot-multipath", got)
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".ipxe")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs from %s (-want +got):\n%s", name, path, diff)
	}
}

var update = flag.Bool("update", false, "rewrite the golden scripts in testdata/")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
