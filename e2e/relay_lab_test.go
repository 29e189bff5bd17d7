package e2e

import (
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/siteboot/siteboot/internal/netlab"
	"github.com/siteboot/siteboot/internal/redfishsim"
)

// redfishBMC is the test Redfish service as a BMC on the lab's LAN.
type redfishBMC struct {
	sim *redfishsim.Server
	// addr is its address on the LAN (https://IP:PORT), pin its
	// certificate's SPKI SHA-256 in hex.
	addr, pin string
}

// redfishPort is the port the Redfish BMC answers on in the lab.
const redfishPort = 443

// startRedfish starts the test Redfish service (account bmcUser and
// password) and makes it reachable at h's address, port 443: the service
// listens on the test's loopback and a byte-for-byte TCP relay in h's
// namespace forwards to it, so TLS runs end to end between siteboot and
// the service.
func startRedfish(t *testing.T, h *netlab.Host, password string) *redfishBMC {
	t.Helper()
	sim, err := redfishsim.Start(redfishsim.Config{User: bmcUser, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	lan := netip.AddrPortFrom(h.Addr(), redfishPort)
	forwardTCP(t, h, lan, sim.Addr())
	return &redfishBMC{sim: sim, addr: "https://" + lan.String(), pin: hex.EncodeToString(sim.SPKISHA256())}
}

// forwardTCP accepts connections on from inside h's namespace and relays
// each, both ways, to to (dialled from the test's own namespace) until
// either side closes or the test ends.
func forwardTCP(t *testing.T, h *netlab.Host, from, to netip.AddrPort) {
	t.Helper()
	ln, err := h.Listen(h.Lab().Context(), "tcp4", from.String())
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to.String())
			if err != nil {
				in.Close()
				continue
			}
			track(in, true)
			track(out, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				relay(in, out)
				track(in, false)
				track(out, false)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// relay copies a to b and b to a until both directions end, then closes
// both.
func relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok && (err == nil || errors.Is(err, net.ErrClosed)) {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}

// countUDP counts the datagrams that reach at, a UDP port opened inside
// h's namespace, until the test ends.
func countUDP(t *testing.T, h *netlab.Host, at netip.AddrPort) *atomic.Int64 {
	t.Helper()
	pc, err := h.ListenPacket(h.Lab().Context(), nil, "udp4", at.String())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return &n
}
