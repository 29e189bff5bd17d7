package dhcpproxy

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/internal/metrictest"
)

// TestSpoofedSourcesDoNotStallTheSocket: a stranger on the link sends
// port-4011 REQUESTs naming a known MAC from two on-link addresses that
// nobody answers ARP for. Each reply waits in its address's ARP queue, up
// to about 200 KiB per address, counted against the server socket's send
// buffer. Once that buffer was full the reader waited for room and read
// nothing more: a machine asking meanwhile got 0 answers of 40.
//
//   - With Listen's socket (its 8 MiB send buffer) the machine gets its
//     answers.
//   - With a send buffer the stranger does fill, the reader still reads
//     and decides every request; the replies that find no room are
//     dropped and counted in send_errors_total, not waited for.
func TestSpoofedSourcesDoNotStallTheSocket(t *testing.T) {
	lab := newNetnsLab(t)
	for _, tc := range []struct {
		name   string
		sndBuf int // set on the server's sockets after Listen; 0 leaves Listen's
	}{{"listen's send buffer", 0}, {"a full send buffer", 64 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Interfaces = []string{"s1"} })
			var conns []*Conn
			if err := inNetns(lab.srv, func() (err error) { conns, err = f.srv.Listen(context.Background()); return }); err != nil {
				t.Fatal(err)
			}
			if tc.sndBuf > 0 {
				for _, c := range conns {
					rawFD(t, c.PacketConn.(*net.UDPConn), func(fd int) {
						if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, tc.sndBuf); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.srv.Serve(ctx, conns...) }()
			defer func() { cancel(); <-done }()

			var legit *net.UDPConn
			var spoofs [2]*net.UDPConn
			if err := inNetns(lab.c1, func() (err error) {
				if legit, err = clientSocket("", "10.231.1.2:0"); err != nil {
					return err
				}
				// Addresses of the link that no host holds: the server's
				// ARP requests for them go unanswered.
				lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
					var serr error
					err := rc.Control(func(fd uintptr) {
						serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
						if serr == nil {
							serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TRANSPARENT, 1)
						}
					})
					if err != nil {
						return err
					}
					return serr
				}}
				for i, addr := range []string{"10.231.1.77:1025", "10.231.1.78:1025"} {
					pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
					if err != nil {
						return err
					}
					spoofs[i] = pc.(*net.UDPConn)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			defer legit.Close()
			defer spoofs[0].Close()
			defer spoofs[1].Close()
			srv := &net.UDPAddr{IP: net.IPv4(10, 231, 1, 1), Port: PXEPort}

			var answered atomic.Int64
			go func() {
				buf := make([]byte, 2048)
				for {
					if _, _, err := legit.ReadFromUDP(buf); err != nil {
						return
					}
					answered.Add(1)
				}
			}()
			var spoofed atomic.Int64
			stop := make(chan struct{})
			attacked := make(chan struct{})
			go func() { // the stranger: 600 requests every 2 s
				defer close(attacked)
				bad := pxeReq(t, macCustom, dhcpv4.MessageTypeRequest, 7, withUUID)
				for {
					for range 300 {
						for _, s := range spoofs {
							if _, err := s.WriteToUDP(bad, srv); err == nil {
								spoofed.Add(1)
							}
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Second):
					}
				}
			}()
			good := pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, withUUID)
			time.Sleep(200 * time.Millisecond)
			const n = 40
			for range n { // 4 s, one request per 100 ms
				if _, err := legit.WriteToUDP(good, srv); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			close(stop)
			<-attacked
			// Every datagram sent is decided: the reader did not stop.
			sent := float64(int64(n) + spoofed.Load())
			acks := f.srv.m.requests.WithLabelValues("request", resultAck)
			for deadline := time.Now().Add(5 * time.Second); metrictest.Counter(t, acks) < sent && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			got, decided, sendErrs := answered.Load(), metrictest.Counter(t, acks), metrictest.Counter(t, f.srv.m.sendErrors)
			t.Logf("machine: %d of %d answered; %v of %v requests decided; %v replies dropped", got, n, decided, sent, sendErrs)
			if decided != sent {
				t.Errorf("%v of %v requests decided: the reader stopped reading", decided, sent)
			}
			if tc.sndBuf == 0 && got < n*9/10 {
				t.Errorf("the machine got %d answers of %d while a stranger sent from two silent addresses", got, n)
			}
			if tc.sndBuf > 0 && sendErrs == 0 {
				t.Error("no reply counted in send_errors_total with the send buffer full")
			}
		})
	}
}
