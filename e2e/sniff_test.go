package e2e

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/internal/netlab"
)

// sniffer listens on UDP 67 of a lab host of its own and records the
// broadcast DHCP requests of the VMs, so a test can say what each firmware
// sent (option 60, 93, 77, 97) without trusting the server under test.
type sniffer struct {
	pc   net.PacketConn
	done chan struct{}

	mu   sync.Mutex
	seen map[string][]request // by client MAC
}

// request is what one client request carried.
type request struct {
	At          time.Time
	Type        string
	VendorClass string
	Arch        int // option 93's first code; -1 when absent
	UserClass   string
	UUID        string // option 97 as hex; "" when absent
	HasUUID     bool
}

// startSniffer opens 0.0.0.0:67 on h and records until the test ends.
func startSniffer(t *testing.T, h *netlab.Host) *sniffer {
	t.Helper()
	pc, err := h.ListenPacket(h.Lab().Context(), nil, "udp4", "0.0.0.0:67")
	if err != nil {
		t.Fatal(err)
	}
	s := &sniffer{pc: pc, done: make(chan struct{}), seen: map[string][]request{}}
	go s.run()
	t.Cleanup(func() {
		pc.Close()
		<-s.done
	})
	return s
}

func (s *sniffer) run() {
	defer close(s.done)
	buf := make([]byte, 2048)
	for {
		n, _, err := s.pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		d, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || d.OpCode != dhcpv4.OpcodeBootRequest {
			continue
		}
		s.add(d)
	}
}

func (s *sniffer) add(d *dhcpv4.DHCPv4) {
	r := request{At: time.Now(), Type: d.MessageType().String(), Arch: -1,
		VendorClass: d.ClassIdentifier(), UserClass: string(d.Options.Get(dhcpv4.OptionUserClassInformation))}
	if a := d.Options.Get(dhcpv4.OptionClientSystemArchitectureType); len(a) >= 2 {
		r.Arch = int(binary.BigEndian.Uint16(a))
	}
	if d.Options.Has(dhcpv4.OptionClientMachineIdentifier) {
		r.HasUUID = true
		r.UUID = hex.EncodeToString(d.Options.Get(dhcpv4.OptionClientMachineIdentifier))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mac := d.ClientHWAddr.String()
	s.seen[mac] = append(s.seen[mac], r)
}

// requests returns what mac sent so far.
func (s *sniffer) requests(mac string) []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.seen[mac]...)
}

// firstUUIDs returns option 97 (hex) of the first request without user
// class iPXE (raw firmware) and of the first one with it (iPXE), "" when
// none was seen.
func (s *sniffer) firstUUIDs(mac string) (firmware, ipxe string) {
	var fwSeen, ipxeSeen bool
	for _, r := range s.requests(mac) {
		isIPXE := r.UserClass == "iPXE"
		switch {
		case isIPXE && !ipxeSeen:
			ipxe, ipxeSeen = r.UUID, true
		case !isIPXE && !fwSeen:
			firmware, fwSeen = r.UUID, true
		}
	}
	return firmware, ipxe
}
