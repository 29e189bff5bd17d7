package dhcpproxy

import (
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The test site: MACs with entries, one expired, one unknown.
const (
	macPlain   = "52:54:00:00:00:01" // no boot_file: per-arch default
	macCustom  = "52:54:00:00:00:02" // boot_file = custom/snponly.efi
	macURL     = "52:54:00:00:00:03" // boot_file = an http URL
	macExpired = "52:54:00:00:00:04" // not_after in the past
	macUnknown = "52:54:00:00:00:99" // no entry
)

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestState returns a real site.State holding the test entries.
func newTestState(t testing.TB) *site.State {
	t.Helper()
	live := timestamppb.New(testNow.Add(time.Hour))
	entries := []*sitev1.ProxyDhcpEntry{
		{Mac: macPlain, NotAfter: live},
		{Mac: macCustom, BootFile: "custom/snponly.efi", NotAfter: live},
		{Mac: macURL, BootFile: "http://10.9.9.9/custom.efi", NotAfter: live},
		{Mac: macExpired, NotAfter: timestamppb.New(testNow.Add(-time.Second))},
	}
	cmd, err := proto.Marshal(&statev1.SiteCommand{
		At: timestamppb.New(testNow.Add(-time.Hour)),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "node-1", Entries: entries}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := site.NewState()
	if res, ok := st.ApplyCommand(cmd).(error); ok {
		t.Fatalf("put entries: %v", res)
	}
	return st
}

// testGate is a lease gate the test opens and closes.
type testGate struct {
	epoch  uint64
	closed atomic.Bool
}

func (g *testGate) Gate() (uint64, bool) {
	if g.closed.Load() {
		return 0, false
	}
	return g.epoch, true
}

// bootFileMap stands in for the images package, which is not written yet.
type bootFileMap map[string]string

func (m bootFileMap) BootFile(arch string) (string, bool) {
	f, ok := m[arch]
	return f, ok
}

var testBootFiles = bootFileMap{
	"bios":       "undionly.kpxe",
	"x86_64-efi": "ipxe.efi",
	"arm64-efi":  "arm64/ipxe.efi",
}

// recorder collects sightings.
type recorder struct {
	mu  sync.Mutex
	got []discovery.Sighting
}

func (r *recorder) Record(s discovery.Sighting) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *recorder) sightings() []discovery.Sighting {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]discovery.Sighting(nil), r.got...)
}

type fixture struct {
	srv  *Server
	gate *testGate
	rec  *recorder
}

func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{gate: &testGate{epoch: 7}, rec: &recorder{}}
	cfg := Config{
		HTTPPort:  8080,
		Relays:    []netip.Prefix{testRelays},
		Entries:   newTestState(t),
		Gate:      f.gate,
		Discovery: f.rec,
		BootFiles: testBootFiles,
		Now:       func() time.Time { return testNow },
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.srv = srv
	return f
}

// The server is 10.0.0.2 on eth0, subnet 10.0.0.0/24; relays in
// 10.1.0.0/24 are configured (dhcp.relays).
var (
	srvIP      = net.IPv4(10, 0, 0, 2).To4()
	srvNet     = netip.MustParsePrefix("10.0.0.2/24")
	testRelays = netip.MustParsePrefix("10.1.0.0/24")
	// arrive67 is a client's broadcast on UDP 67.
	arrive67 = Arrival{Iface: "eth0", ServerIP: srvIP, Port: ServerPort, Net: srvNet,
		Source: &net.UDPAddr{IP: net.IPv4zero, Port: ClientPort}, Dst: netip.MustParseAddr("255.255.255.255")}
	// arrive4011 is a client's unicast to UDP 4011.
	arrive4011 = Arrival{Iface: "eth0", ServerIP: srvIP, Port: PXEPort, Net: srvNet,
		Source: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 50), Port: 1025}, Dst: netip.MustParseAddr("10.0.0.2")}
)

// unicast67 is a packet sent to 10.0.0.2:67 from src:port.
func unicast67(src string, port int) Arrival {
	in := arrive67
	in.Source = &net.UDPAddr{IP: net.ParseIP(src).To4(), Port: port}
	in.Dst = netip.MustParseAddr("10.0.0.2")
	return in
}

var testXID = dhcpv4.TransactionID{0xde, 0xad, 0xbe, 0xef}

// uuidOpt is a well-formed option 97: type 0 + 16 bytes, in the SMBIOS
// byte order firmware sends (first three fields little-endian) for the
// UUID 4c4c4544-004a-3510-804b-b4c04f565931.
var uuidOpt = append([]byte{0}, mustHex("44454c4c4a001035804bb4c04f565931")...)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// pxeReq builds an encoded BOOTREQUEST from a PXE client.
func pxeReq(t testing.TB, mac string, mt dhcpv4.MessageType, arch uint16, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	return buildReq(t, mac, mt, append([]dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(classFor(arch))),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{byte(arch >> 8), byte(arch)}),
	}, mods...)...)
}

func classFor(arch uint16) string {
	if _, http, _ := lookupArch(arch); http {
		return "HTTPClient:Arch:000" + twoDigits(arch) + ":UNDI:003016"
	}
	return "PXEClient:Arch:000" + twoDigits(arch) + ":UNDI:002001"
}

func twoDigits(n uint16) string { return string([]byte{'0' + byte(n/10), '0' + byte(n%10)}) }

// buildReq builds an encoded BOOTREQUEST with only the given options.
func buildReq(t testing.TB, mac string, mt dhcpv4.MessageType, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	base := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(testXID),
		dhcpv4.WithHwAddr(hw),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithMessageType(mt),
	}
	d, err := dhcpv4.New(append(base, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToBytes()
}

// summary is what a test compares of a reply.
type summary struct {
	Type                   string
	XID                    string
	Flags                  uint16
	CIAddr, YIAddr, SIAddr string
	GIAddr                 string
	SName, File            string
	Opt54, Opt60, Opt67    string
	Opt43, Opt97, Opt82    string // "hex:<bytes>" when present
	To                     string
}

func summarize(t testing.TB, reply []byte, to *net.UDPAddr) summary {
	t.Helper()
	r, err := dhcpv4.FromBytes(reply)
	if err != nil {
		t.Fatalf("reply does not decode: %v", err)
	}
	if r.OpCode != dhcpv4.OpcodeBootReply {
		t.Fatalf("reply op = %v", r.OpCode)
	}
	return summary{
		Type: r.MessageType().String(), XID: r.TransactionID.String(), Flags: r.Flags,
		CIAddr: r.ClientIPAddr.String(), YIAddr: r.YourIPAddr.String(), SIAddr: r.ServerIPAddr.String(),
		GIAddr: r.GatewayIPAddr.String(), SName: r.ServerHostName, File: r.BootFileName,
		Opt54: r.ServerIdentifier().String(), Opt60: r.ClassIdentifier(), Opt67: r.BootFileNameOption(),
		Opt43: optHex(r, dhcpv4.OptionVendorSpecificInformation),
		Opt97: optHex(r, dhcpv4.OptionClientMachineIdentifier),
		Opt82: optHex(r, dhcpv4.OptionRelayAgentInformation),
		To:    to.String(),
	}
}

func optHex(r *dhcpv4.DHCPv4, code dhcpv4.OptionCode) string {
	if !r.Options.Has(code) {
		return ""
	}
	return "hex:" + hex.EncodeToString(r.Options.Get(code))
}

// equateAddrs compares netip.Addr values (in sightings) by value.
var equateAddrs = cmpopts.EquateComparable(netip.Addr{})

// TestMain fails the package's tests when one of them leaks a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
