package dhcpproxy

import (
	"sync/atomic"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
)

// knownMACs are the MACs of the test site with a live entry.
var knownMACs = map[string]bool{macPlain: true, macCustom: true, macURL: true}

// checkingSink counts sightings of MACs that do have a live entry, which
// must never happen.
type checkingSink struct{ wrong atomic.Int64 }

func (c *checkingSink) Record(s discovery.Sighting) {
	if knownMACs[s.MAC] {
		c.wrong.Add(1)
	}
}

// FuzzHandle feeds any bytes to the decision on both ports: it must never
// panic, never answer a MAC without a live entry, and every answer must be
// a decodable BOOTREPLY for the same client and transaction with yiaddr 0.
func FuzzHandle(f *testing.F) {
	f.Add(pxeReq(f, macPlain, dhcpv4.MessageTypeDiscover, 0))
	f.Add(pxeReq(f, macPlain, dhcpv4.MessageTypeRequest, 16, withUUID))
	f.Add(pxeReq(f, macCustom, dhcpv4.MessageTypeDiscover, 7, withIPXE, dhcpv4.WithRelay(relayIPv4)))
	f.Add(pxeReq(f, macUnknown, dhcpv4.MessageTypeDiscover, 11, withUUID))
	f.Add([]byte{})
	sink := &checkingSink{}
	fx := newFixture(f, func(c *Config) { c.Discovery = sink })
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for _, in := range []Arrival{arrive67, arrive4011} {
			reply, to, ok := fx.srv.Handle(pkt, in)
			if sink.wrong.Load() != 0 {
				t.Fatal("recorded a sighting for a MAC with a live entry")
			}
			if !ok {
				if reply != nil || to != nil {
					t.Fatalf("no answer, yet reply %d bytes to %v", len(reply), to)
				}
				continue
			}
			checkAnswer(t, pkt, reply, to)
		}
	})
}

func checkAnswer(t *testing.T, pkt, reply []byte, to interface{ String() string }) {
	t.Helper()
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		t.Fatalf("answered a packet that does not decode: %v", err)
	}
	if !knownMACs[req.ClientHWAddr.String()] {
		t.Fatalf("answered %s, which has no live entry", req.ClientHWAddr)
	}
	r, err := dhcpv4.FromBytes(reply)
	if err != nil {
		t.Fatalf("reply does not decode: %v", err)
	}
	if r.OpCode != dhcpv4.OpcodeBootReply || r.TransactionID != req.TransactionID ||
		r.ClientHWAddr.String() != req.ClientHWAddr.String() || !r.YourIPAddr.IsUnspecified() {
		t.Fatalf("reply %v does not answer request %v", r, req)
	}
	if to == nil {
		t.Fatal("reply without destination")
	}
}
