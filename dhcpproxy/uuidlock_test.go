package dhcpproxy

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// observer collects what the server reports of machines with an entry.
type observer struct {
	mu  sync.Mutex
	got []discovery.Sighting
}

func (o *observer) Observe(s discovery.Sighting) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, s)
}

const (
	macPinned = "52:54:00:00:00:05" // product_uuid pinned to pinnedUUID
	// pinnedUUID is what uuidOpt (option 97 in SMBIOS byte order) decodes to.
	pinnedUUID = "4c4c4544-004a-3510-804b-b4c04f565931"
)

// TestHandleUUIDLock: an entry that pins a product_uuid answers only a
// request whose option 97 carries that UUID; any other request for the MAC
// is an unknown machine: silent, recorded, counted and logged as a
// mismatch. Entries without a pin answer as before, and every answered
// request is reported to the observer.
func TestHandleUUIDLock(t *testing.T) {
	st := site.NewState()
	live := timestamppb.New(testNow.Add(time.Hour))
	putEntries(t, st,
		&sitev1.ProxyDhcpEntry{Mac: macPinned, ProductUuid: pinnedUUID, NotAfter: live},
		&sitev1.ProxyDhcpEntry{Mac: macPlain, NotAfter: live})
	other := append([]byte{0}, mustHex("44454c4c4a001035804bb4c04f565932")...) // ...5932
	opt97 := func(v []byte) dhcpv4.Modifier { return dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, v) }
	tests := []struct {
		name     string
		mac      string
		mods     []dhcpv4.Modifier
		in       Arrival
		decision string
		recorded string // the UUID of the sighting recorded as discovered; "-" for none
		observed string // the UUID reported to the observer; "-" for none
	}{
		{"pinned, option 97 matches (firmware byte order)", macPinned, []dhcpv4.Modifier{withUUID}, arrive67, "offer", "-", pinnedUUID},
		{"pinned, another UUID", macPinned, []dhcpv4.Modifier{opt97(other)}, arrive67, "uuid-mismatch", "4c4c4544-004a-3510-804b-b4c04f565932", "-"},
		{"pinned, no option 97", macPinned, nil, arrive67, "uuid-mismatch", "", "-"},
		{"pinned, empty option 97", macPinned, []dhcpv4.Modifier{opt97([]byte{})}, arrive67, "uuid-mismatch", "", "-"},
		{"pinned, placeholder UUID", macPinned, []dhcpv4.Modifier{opt97(make([]byte, 17))}, arrive67, "uuid-mismatch", "", "-"},
		{"pinned, another UUID on 4011", macPinned, []dhcpv4.Modifier{opt97(other)}, arrive4011, "uuid-mismatch", "4c4c4544-004a-3510-804b-b4c04f565932", "-"},
		{"not pinned, any UUID", macPlain, []dhcpv4.Modifier{opt97(other)}, arrive67, "offer", "-", "4c4c4544-004a-3510-804b-b4c04f565932"},
		{"not pinned, no UUID", macPlain, nil, arrive67, "offer", "-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			obs := &observer{}
			f := newFixture(t, func(c *Config) {
				c.Entries, c.Observed = st, obs
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			reply, _, ok := f.srv.Handle(pxeReq(t, tt.mac, dhcpv4.MessageTypeDiscover, 7, tt.mods...), tt.in)
			if d := f.srv.decide(pxeReq(t, tt.mac, dhcpv4.MessageTypeDiscover, 7, tt.mods...), tt.in); d.label() != tt.decision {
				t.Errorf("decision %s, want %s", d.label(), tt.decision)
			}
			if ok != (tt.decision == "offer") || (reply != nil) != ok {
				t.Errorf("answered = %v", ok)
			}
			got := []string{uuidOf(f.rec.sightings()), uuidOf(obs.got)}
			if diff := cmp.Diff([]string{tt.recorded, tt.observed}, got); diff != "" {
				t.Errorf("[recorded, observed] UUIDs (-want +got):\n%s", diff)
			}
			if tt.decision == "uuid-mismatch" && !(strings.Contains(logs.String(), `"level":"WARN"`) &&
				strings.Contains(logs.String(), `"reason":"the entry pins product_uuid `+pinnedUUID)) {
				t.Errorf("no Warn line saying why:\n%s", logs.String())
			}
		})
	}
}

// uuidOf is the UUID of the first sighting; "-" when there is none.
func uuidOf(s []discovery.Sighting) string {
	if len(s) == 0 {
		return "-"
	}
	return s[0].ProductUUID
}
