package main

import (
	"context"
	"errors"
	"go.uber.org/goleak"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// peer is a DHCP answerer on loopback: for each DISCOVER it sends a proxy
// offer from server 10.0.0.2 and, optionally, a plain offer from 10.0.0.1,
// as two servers on one LAN would.
type peer struct {
	DropEvery int  // ignore every n-th DISCOVER (0: none)
	Plain     bool // also answer with a plain offer
	WrongMAC  bool // put another chaddr in the proxy offer
	Twice     bool // send the proxy offer twice
	Foreign   bool // also answer, from server 10.0.0.3, an xid that was not asked
	Delay     time.Duration
	// Seen, if set, is closed once the peer has read SeenAfter requests.
	Seen      chan struct{}
	SeenAfter int
}

func startPeer(t *testing.T, p peer) *net.UDPAddr {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.serve(conn) })
	t.Cleanup(func() { conn.Close(); wg.Wait() })
	return conn.LocalAddr().(*net.UDPAddr)
}

func (p peer) serve(conn net.PacketConn) {
	buf := make([]byte, 1500)
	for n := 1; ; n++ {
		size, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if p.Seen != nil && n == p.SeenAfter {
			close(p.Seen)
		}
		req, err := dhcpv4.FromBytes(buf[:size])
		if err != nil || (p.DropEvery > 0 && n%p.DropEvery == 0) {
			continue
		}
		time.Sleep(p.Delay)
		for _, reply := range p.replies(req) {
			_, _ = conn.WriteTo(reply, from)
		}
	}
}

func (p peer) replies(req *dhcpv4.DHCPv4) [][]byte {
	proxy, _ := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 2))))
	if p.WrongMAC {
		proxy.ClientHWAddr = net.HardwareAddr{2, 0, 0, 0, 0, 0}
	}
	out := [][]byte{proxy.ToBytes()}
	if p.Twice {
		out = append(out, proxy.ToBytes())
	}
	if p.Foreign {
		other, _ := dhcpv4.NewReplyFromRequest(req,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 3))))
		other.TransactionID[0] ^= 0x80 // an earlier run's, or another client's
		out = append([][]byte{other.ToBytes()}, out...)
	}
	if p.Plain {
		plain, _ := dhcpv4.NewReplyFromRequest(req,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
			dhcpv4.WithYourIP(net.IPv4(10, 0, 0, 100)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 1))))
		out = append([][]byte{plain.ToBytes()}, out...)
	}
	return out
}

func TestRunAgainstLoopbackPeer(t *testing.T) {
	tests := []struct {
		name  string
		peer  peer
		opts  options
		want  Result
		slack uint64 // replies that may arrive after the run ends
	}{
		{
			name: "closed loop, two servers",
			peer: peer{Plain: true},
			opts: options{Outstanding: 8, Requests: 400},
			want: Result{Mode: "closed", Outstanding: 8, MACs: 50, Sent: 400, Offers: 400, Servers: []ServerStat{
				{Server: "10.0.0.1", Replies: 400, PlainOffers: 400},
				{Server: "10.0.0.2", Replies: 400, ProxyOffers: 400},
			}},
		},
		{
			name: "closed loop, every fourth dropped",
			peer: peer{DropEvery: 4},
			opts: options{Outstanding: 4, Requests: 100, Timeout: 100 * time.Millisecond},
			want: Result{Mode: "closed", Outstanding: 4, MACs: 50, Sent: 100, Offers: 75, Lost: 25, LossPct: 25,
				Servers: []ServerStat{{Server: "10.0.0.2", Replies: 75, ProxyOffers: 75}}},
		},
		{
			name: "open loop with duplicates",
			peer: peer{Twice: true},
			opts: options{Rate: 2000, Requests: 200},
			// The run may end before the last duplicate is read: 199 or 200.
			want: Result{Mode: "open", Rate: 2000, MACs: 50, Sent: 200, Offers: 200, Unmatched: 200,
				Servers: []ServerStat{{Server: "10.0.0.2", Replies: 400, ProxyOffers: 400}}},
			slack: 1,
		},
		{
			name: "replies to xids not sent count in no server",
			peer: peer{Foreign: true},
			opts: options{Outstanding: 4, Requests: 40},
			want: Result{Mode: "closed", Outstanding: 4, MACs: 50, Sent: 40, Offers: 40, Foreign: 40,
				Servers: []ServerStat{{Server: "10.0.0.2", Replies: 40, ProxyOffers: 40}}},
		},
		{
			name: "wrong chaddr is no answer",
			peer: peer{WrongMAC: true},
			opts: options{Outstanding: 2, Requests: 10, Timeout: 50 * time.Millisecond},
			want: Result{Mode: "closed", Outstanding: 2, MACs: 50, Sent: 10, Lost: 10, LossPct: 100, WrongMAC: 10,
				Servers: []ServerStat{{Server: "10.0.0.2", Replies: 10, ProxyOffers: 10}}},
		},
		{
			name: "server-id filter",
			peer: peer{},
			opts: options{Outstanding: 2, Requests: 10, Timeout: 50 * time.Millisecond, ServerID: "10.0.0.9"},
			want: Result{Mode: "closed", Outstanding: 2, MACs: 50, Sent: 10, Lost: 10, LossPct: 100,
				Servers: []ServerStat{{Server: "10.0.0.2", Replies: 10, ProxyOffers: 10}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runPeer(t, tc.peer, tc.opts)
			if short := tc.want.Unmatched - res.Unmatched; tc.slack > 0 && short <= tc.slack {
				res.Unmatched += short
				res.Servers[0].Replies += short
				res.Servers[0].ProxyOffers += short
			}
			ignore := cmpopts.IgnoreFields(Result{}, "Target", "ElapsedS", "OffersPerSec", "Latency", "ScheduleLag")
			if diff := cmp.Diff(tc.want, res, ignore); diff != "" {
				t.Errorf("result mismatch (-want +got):\n%s", diff)
			}
			if res.Offers > 0 && (res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.OffersPerSec <= 0) {
				t.Errorf("implausible latency/throughput: %+v, %.0f/s", res.Latency, res.OffersPerSec)
			}
			if (res.ScheduleLag != nil) != (tc.opts.Rate > 0) {
				t.Errorf("schedule lag reported = %v, want it for open loop only", res.ScheduleLag != nil)
			}
		})
	}
}

func TestRunLatencyReflectsServerDelay(t *testing.T) {
	res := runPeer(t, peer{Delay: 5 * time.Millisecond}, options{Outstanding: 1, Requests: 20})
	if res.Latency.P50 < 5 || res.Latency.P50 > 50 {
		t.Errorf("p50 %.3f ms for a server that waits 5 ms before answering", res.Latency.P50)
	}
}

// TestRunStopsOnCancel: a run whose context ends returns promptly with
// what it counted so far. The context ends once the peer has read 20
// requests: with 4 outstanding, at least 16 of them were answered by then
// (a timer would race the run's start on a loaded machine). The time is
// taken just before cancel, where the context ends, and compared with
// when the run returned; taken after the run returned it would measure
// nothing.
func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan struct{})
	cancelled := make(chan time.Time, 1)
	go func() {
		select {
		case <-seen:
		case <-ctx.Done():
		}
		cancelled <- time.Now()
		cancel()
	}()
	res := runPeerCtx(ctx, t, peer{Seen: seen, SeenAfter: 20}, options{Outstanding: 4, Duration: time.Minute})
	returned := time.Now()
	select {
	case <-seen:
	default:
		t.Fatalf("the run ended before the peer read 20 requests: %+v", res)
	}
	if el := returned.Sub(<-cancelled); el > 5*time.Second {
		t.Errorf("run took %v after its context ended", el)
	}
	if res.Sent < 20 || res.Offers == 0 {
		t.Errorf("want at least 20 sent and some offers before cancel: %+v", res)
	}
}

func runPeer(t *testing.T, p peer, o options) Result {
	return runPeerCtx(context.Background(), t, p, o)
}

func runPeerCtx(ctx context.Context, t *testing.T, p peer, o options) Result {
	t.Helper()
	addr := startPeer(t, p)
	o.Server = addr.String()
	o.Arch = 7
	o.Outstanding = max(o.Outstanding, 1)
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	macs, err := generateMACs("02:5b", 50)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := runLoad(ctx, o, macs, conn)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return res
}

// TestMain fails the package's tests when one of them leaks a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A stranger on the LAN sees the DISCOVERs (they are broadcast), so it
// can answer a xid of the run from as many server ids as it likes: the
// per-server table must stay bounded, with every reply still counted.
func TestServerTableIsBounded(t *testing.T) {
	const base, replies = 0xfffffff0, 10_000
	macs := [][6]byte{{2, 0x5b, 0, 0, 0, 1}}
	r := newRunner(loadSpec{}, nil, [][]byte{nil}, macs, base)
	r.seq.Store(1) // request 0 sent: xid base is the run's
	req, err := dhcpv4.NewDiscovery(net.HardwareAddr(macs[0][:]))
	if err != nil {
		t.Fatal(err)
	}
	req.TransactionID = dhcpv4.TransactionID{0xff, 0xff, 0xff, 0xf0}
	from := &net.UDPAddr{IP: net.IPv4(10, 9, 9, 9), Port: 67}
	for i := range replies {
		rep, err := dhcpv4.NewReplyFromRequest(req,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 1, byte(i>>8), byte(i)))))
		if err != nil {
			t.Fatal(err)
		}
		r.handle(rep.ToBytes(), from, time.Now())
	}
	res := r.result()
	if len(res.Servers) > maxServers+1 {
		t.Errorf("%d distinct server ids gave %d rows; want at most %d", replies, len(res.Servers), maxServers+1)
	}
	var total uint64
	for _, s := range res.Servers {
		total += s.Replies
	}
	if total != replies || res.Foreign != 0 {
		t.Errorf("%d replies counted in the table, %d foreign; want all %d in the table", total, res.Foreign, replies)
	}
	if last := res.Servers[len(res.Servers)-1]; last.Server != otherServers || last.Replies != replies-maxServers {
		t.Errorf("last row %+v; want %q with the %d replies past the first %d servers", last, otherServers, replies-maxServers, maxServers)
	}
}
