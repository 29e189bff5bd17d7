package bmc

import (
	"context"
	"crypto/sha256"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/metrictest"
	"github.com/siteboot/siteboot/internal/relayerr"
)

func TestRedfishPin(t *testing.T) {
	s := startRedfish(t, false)
	tr := newTestRelay(t, nil)

	other := sha256.Sum256([]byte("another key"))
	req := rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`)
	req.TlsSpkiSha256 = other[:]
	wantCode(t, tr.do(t, req), relayerr.PinMismatch, "tls_spki_sha256")
	if st := s.State(); st.PowerOn || s.Requests() != 0 {
		t.Fatalf("pin mismatch: the BMC got %d requests, power on=%v", s.Requests(), st.PowerOn)
	}

	wantOK(t, tr.do(t, rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`)), `{"requested":"on"}`)
	if !s.State().PowerOn {
		t.Fatal("with the right pin the system did not power on")
	}

	// Without a pin the certificate is not verified (self-signed BMCs).
	req = rfReq(s, "env://RF", "power.getPower", "")
	req.TlsSpkiSha256 = nil
	wantOK(t, tr.do(t, req), `{"power":"on"}`)
}

func TestRedfishWrongPassword(t *testing.T) {
	s := startRedfish(t, false)
	tr := newTestRelay(t, nil)
	wantCode(t, tr.do(t, rfReq(s, "env://RF_WRONG", "power.setPower", `{"state":"on"}`)), relayerr.AuthFailed, "refused the credentials")
	if s.State().PowerOn || s.Sessions() != 0 {
		t.Fatalf("wrong password changed state: %+v, %d sessions", s.State(), s.Sessions())
	}
}

func TestRedfishUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr := newTestRelay(t, nil)
	wantCode(t, tr.do(t, &sitev1.BmcOperationRequest{Driver: "redfish", Address: addr, CredentialsRef: "env://RF",
		Operation: "power.getPower"}), relayerr.Unreachable, "connection refused")
}

// countingListeners count every TCP connection and UDP packet that reaches
// 127.0.0.1 on their ports.
type countingListeners struct {
	tcp, udp atomic.Int64
	tcpAddr  netip.AddrPort
	udpAddr  netip.AddrPort
	wg       sync.WaitGroup
}

func startCounting(t *testing.T) *countingListeners {
	t.Helper()
	c := &countingListeners{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.tcpAddr = netip.MustParseAddrPort(ln.Addr().String())
	c.udpAddr = netip.MustParseAddrPort(pc.LocalAddr().String())
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.tcp.Add(1)
			conn.Close()
		}
	}()
	go func() {
		defer c.wg.Done()
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			c.udp.Add(1)
		}
	}()
	t.Cleanup(func() { ln.Close(); pc.Close(); c.wg.Wait() })
	return c
}

// countingResolver answers from a map and counts lookups.
type countingResolver struct {
	answers map[string][]netip.Addr
	lookups atomic.Int64
}

func (r *countingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestForbiddenTargetSendsNothing(t *testing.T) {
	c := startCounting(t)
	loop := netip.MustParseAddr("127.0.0.1")
	res := &countingResolver{answers: map[string][]netip.Addr{
		"bmc-local.example": {loop},
		"bmc-mixed.example": {netip.MustParseAddr("10.1.2.3"), loop},
	}}
	udp, tcp := c.udpAddr.String(), c.tcpAddr.String()
	cases := []struct {
		name, driver, address, msg string
		networks                   []string
	}{
		{"ipmi literal", "ipmi", udp, "not inside bmc.networks", []string{"10.0.0.0/8"}},
		{"ipmi mapped v6", "ipmi", "[::ffff:127.0.0.1]:" + itoa(c.udpAddr.Port()), "not inside bmc.networks", []string{"10.0.0.0/8"}},
		{"ipmi name", "ipmi", "bmc-local.example:" + itoa(c.udpAddr.Port()), "not inside bmc.networks", []string{"10.0.0.0/8"}},
		{"ipmi mixed name", "ipmi", "bmc-mixed.example:" + itoa(c.udpAddr.Port()), "127.0.0.1", []string{"10.0.0.0/8"}},
		{"redfish literal", "redfish", "https://" + tcp, "not inside bmc.networks", []string{"10.0.0.0/8"}},
		{"redfish host:port", "redfish", tcp, "not inside bmc.networks", []string{"10.0.0.0/8", "127.0.0.2/32"}},
		{"redfish mixed name", "redfish", "https://bmc-mixed.example:" + itoa(c.tcpAddr.Port()), "127.0.0.1", []string{"10.0.0.0/8"}},
		{"empty networks", "redfish", tcp, "bmc.networks is empty", nil},
		{"empty networks ipmi", "ipmi", udp, "bmc.networks is empty", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestRelay(t, func(cfg *Config) {
				cfg.Networks = nil
				for _, n := range tc.networks {
					cfg.Networks = append(cfg.Networks, netip.MustParsePrefix(n))
				}
				cfg.Resolver = res
			})
			wantCode(t, tr.do(t, &sitev1.BmcOperationRequest{Driver: tc.driver, Address: tc.address,
				CredentialsRef: "env://RF", Operation: "power.setPower", ArgsJson: `{"state":"on"}`}),
				relayerr.ForbiddenTarget, tc.msg)
			if tr.secrets.reads != 0 {
				t.Errorf("a forbidden target read the credentials %d times", tr.secrets.reads)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if n, m := c.tcp.Load(), c.udp.Load(); n != 0 || m != 0 {
		t.Fatalf("forbidden targets got %d TCP connections and %d UDP packets", n, m)
	}
	if n := res.lookups.Load(); n != 3 {
		t.Errorf("resolver lookups = %d, want 3 (names only, never IP literals)", n)
	}
}

func itoa(p uint16) string {
	return strconv.Itoa(int(p))
}

func TestMetricsCountOutcomes(t *testing.T) {
	s := startRedfish(t, true)
	tr := newTestRelay(t, nil)
	wantOK(t, tr.do(t, rfReq(s, "env://RF", "power.getPower", "")), `{"power":"on"}`)
	tr.do(t, &sitev1.BmcOperationRequest{Driver: "redfish", Address: "10.9.9.9", CredentialsRef: "env://RF", Operation: "power.getPower"})
	tr.do(t, &sitev1.BmcOperationRequest{Driver: "vendor-x", Address: "10.9.9.9", CredentialsRef: "env://RF", Operation: "made.up"})
	got := metrictest.Values(t, tr.reg)
	for key, want := range map[string]float64{
		`siteboot_bmc_operations_total{code="ok"}{driver="redfish"}{operation="power.getPower"}`:               1,
		`siteboot_bmc_operations_total{code="forbidden-target"}{driver="redfish"}{operation="power.getPower"}`: 1,
		`siteboot_bmc_operations_total{code="unsupported"}{driver="other"}{operation="other"}`:                 1,
		`siteboot_bmc_operation_duration_seconds{driver="redfish"}_count`:                                      2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, got[key], want, got)
		}
	}
}
