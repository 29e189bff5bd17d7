package ipxe

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestAcceptedEntriesRender: an entry the admin API accepts is one /ipxe
// can serve. The API validates with the renderer's own rules, so what it
// stores never turns into a 500 for the machine.
func TestAcceptedEntriesRender(t *testing.T) {
	const agent = "https://agent.example.net/"
	cases := []struct {
		name string
		url  string
		ok   bool // the API accepts it
	}{
		{"plain", agent + "s/52-54-00-00-01-00.ipxe?t=1", true},
		{"percent-encoded", agent + "a%20b.ipxe", true},
		{"iPXE expansion", agent + "${net0/mac}.ipxe", false},
		{"space", agent + "a b.ipxe", false},
		{"fragment", agent + "a.ipxe#x", false},
		{"quote", agent + `a"b.ipxe`, false},
		{"backslash", agent + `a\b.ipxe`, false},
		{"tab", agent + "a\tb.ipxe", false},
	}
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	var want, got []string
	for i, tc := range cases {
		mac := fmt.Sprintf("52:54:00:00:01:%02x", i)
		in := &sitev1.ProxyDhcpEntry{Mac: mac, IpxeScriptUrl: tc.url, NotAfter: timestamppb.New(t0.Add(time.Hour))}
		valid, err := site.ValidateEntries("node-r", []*sitev1.ProxyDhcpEntry{in}, t0, site.Limits{})
		want = append(want, fmt.Sprintf("%s: accepted=%v", tc.name, tc.ok))
		if err != nil {
			got = append(got, fmt.Sprintf("%s: accepted=false", tc.name))
			continue
		}
		f.put(t, "node-r", valid...)
		resp, err := http.Get(ts.URL + "/ipxe?mac=" + mac)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, fmt.Sprintf("%s: accepted=true", tc.name))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: the API stored ipxe_script_url %q, then /ipxe answered %d: %s", tc.name, tc.url, resp.StatusCode, body)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the API accepts (-want +got):\n%s", diff)
	}
}
