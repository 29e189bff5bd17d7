package dhcpproxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// bigState holds n live entries, 02:00:00:xx:xx:xx.
func bigState(b *testing.B, n int) *site.State {
	b.Helper()
	live := timestamppb.New(testNow.Add(time.Hour))
	entries := make([]*sitev1.ProxyDhcpEntry, n)
	for i := range entries {
		entries[i] = &sitev1.ProxyDhcpEntry{Mac: benchMAC(i), NotAfter: live}
	}
	st := site.NewState()
	for len(entries) > 0 { // a command carries at most 256 entries
		k := min(len(entries), 256)
		cmd, err := proto.Marshal(&statev1.SiteCommand{At: timestamppb.New(testNow),
			Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n", Entries: entries[:k]}}})
		if err != nil {
			b.Fatal(err)
		}
		if err, ok := st.ApplyCommand(cmd).(error); ok {
			b.Fatal(err)
		}
		entries = entries[k:]
	}
	if got, _, _ := st.Counts(testNow); got != n {
		b.Fatalf("state holds %d entries, want %d", got, n)
	}
	return st
}

func benchMAC(i int) string {
	return fmt.Sprintf("02:00:00:%02x:%02x:%02x", byte(i>>16), byte(i>>8), byte(i))
}

// BenchmarkHandle is the per-packet decision cost with 10,000 entries: a
// known machine's DISCOVER (decode, lookup, observation, encode), an
// unknown one's, and a datagram of 9,000 bytes of one-byte options.
func BenchmarkHandle(b *testing.B) {
	st := bigState(b, 10_000)
	f := newFixture(b, func(c *Config) {
		c.Entries, c.Discovery = st, &checkingSink{}
		c.Observed = discovery.NewObservations(discovery.ObservationsConfig{})
	})
	for _, tc := range []struct {
		name string
		mac  string
	}{{"known", benchMAC(4321)}, {"unknown", macUnknown}, {"junk", ""}} {
		pkt := junkOptions(b)
		if tc.mac != "" {
			pkt = pxeReq(b, tc.mac, dhcpv4.MessageTypeDiscover, 7, withUUID)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f.srv.Handle(pkt, arrive67)
			}
		})
	}
}

// junkOptions is a DISCOVER whose options fill 9,000 bytes, one byte each.
func junkOptions(b *testing.B) []byte {
	pkt := pxeReq(b, macUnknown, dhcpv4.MessageTypeDiscover, 7)[:240]
	pkt = append(pkt, 53, 1, 1)
	for i := 0; len(pkt) < maxPacket-1; i++ {
		pkt = append(pkt, byte(100+i%150), 1, byte(i))
	}
	return append(pkt, 255)
}
