package dhcpproxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestAcceptedBootFilesAreServed: a boot_file the admin API accepts is one
// the proxy puts into its offers as it is, for raw PXE and for UEFI HTTP
// boot: it fits the BOOTP file field and holds nothing a boot URI or TFTP
// name cannot carry. The API checks with the proxy's own rules.
func TestAcceptedBootFilesAreServed(t *testing.T) {
	cases := []struct {
		name, file string
		ok         bool // the API accepts it
	}{
		{"name", "custom/snponly.efi", true},
		{"url", "http://10.9.9.9/custom.efi", true},
		{"url with a space", "http://10.9.9.9/a b.efi", false},
		{"url with an expansion", "http://10.9.9.9/${net0/mac}.efi", false},
		{"url longer than the file field", "http://10.9.9.9/" + strings.Repeat("a", 120) + ".efi", false},
		{"name of 64 bytes", strings.Repeat("a", 60) + ".efi", true},
		{"name too long for <base>/boot/<name>", strings.Repeat("a", 90) + ".efi", false},
	}
	// The longest base URL http.advertise may hold.
	base := "http://10.0.0.2:8080/"
	base += strings.Repeat("p", maxBaseLen-len(base))
	st := site.NewState()
	var want, got []string
	for i, tc := range cases {
		mac := fmt.Sprintf("52:54:00:00:01:%02x", i)
		in := &sitev1.ProxyDhcpEntry{Mac: mac, BootFile: tc.file, NotAfter: timestamppb.New(testNow.Add(time.Hour))}
		valid, err := site.ValidateEntries("node-r", []*sitev1.ProxyDhcpEntry{in}, testNow, site.Limits{})
		want = append(want, fmt.Sprintf("%s: accepted=%v", tc.name, tc.ok))
		got = append(got, fmt.Sprintf("%s: accepted=%v", tc.name, err == nil))
		if err != nil {
			continue
		}
		putEntries(t, st, valid...)
		f := newFixture(t, func(c *Config) { c.Entries = st; c.HTTPAdvertise = base })
		for _, arch := range []uint16{7, 16} {
			d := f.srv.decide(pxeReq(t, mac, dhcpv4.MessageTypeDiscover, arch), arrive67)
			if d.result != resultOffer {
				t.Errorf("%s: the API stored boot_file %q; arch %d got %s (%s)", tc.name, tc.file, arch, d.label(), d.reason)
				continue
			}
			if strings.ContainsAny(d.file, " \t$#\\\"") || len(d.file) > maxFileLen {
				t.Errorf("%s: arch %d was offered file %q", tc.name, arch, d.file)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the API accepts (-want +got):\n%s", diff)
	}
}

// putEntries stores validated entries in st through its command path.
func putEntries(t *testing.T, st *site.State, entries ...*sitev1.ProxyDhcpEntry) {
	t.Helper()
	cmd, err := proto.Marshal(&statev1.SiteCommand{At: timestamppb.New(testNow),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "node-r", Entries: entries}}})
	if err != nil {
		t.Fatal(err)
	}
	if err, ok := st.ApplyCommand(cmd).(error); ok {
		t.Fatal(err)
	}
}
