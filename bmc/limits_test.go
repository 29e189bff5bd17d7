package bmc

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redfishsim"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// gateMachine blocks every power change until released.
type gateMachine struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gateMachine {
	return &gateMachine{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gateMachine) SetPower(bool) error {
	g.entered <- struct{}{}
	<-g.release
	return nil
}

func (g *gateMachine) Restart() error { return g.SetPower(true) }

func (g *gateMachine) open() { g.once.Do(func() { close(g.release) }) }

func startGated(t *testing.T) (*redfishsim.Server, *gateMachine) {
	t.Helper()
	g := newGate()
	s, err := redfishsim.Start(redfishsim.Config{User: rfUser, Password: rfPassword, Machine: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	t.Cleanup(g.open) // runs first: unblocks handlers before Close waits for them
	return s, g
}

func startRedfishOn(t *testing.T, addr string) *redfishsim.Server {
	t.Helper()
	s, err := redfishsim.Start(redfishsim.Config{User: rfUser, Password: rfPassword, PoweredOn: true, Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func waitEntered(t *testing.T, g *gateMachine) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the power change never reached the machine")
	}
}

func goDo(tr *testRelay, req *sitev1.BmcOperationRequest) <-chan *sitev1.BmcOperationResult {
	ch := make(chan *sitev1.BmcOperationResult, 1)
	go func() { ch <- tr.Do(context.Background(), req) }()
	return ch
}

func TestOneOperationPerBMC(t *testing.T) {
	s, g := startGated(t)
	other := startRedfishOn(t, "127.0.0.2")
	tr := newTestRelay(t, func(c *Config) { c.Networks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })

	first := goDo(tr, rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`))
	waitEntered(t, g)
	before := s.Requests()
	second := goDo(tr, rfReq(s, "env://RF", "power.getPower", ""))

	// Another BMC is not held up by the busy one.
	wantOK(t, tr.do(t, rfReq(other, "env://RF", "power.getPower", "")), `{"power":"on"}`)
	time.Sleep(300 * time.Millisecond)
	if n := s.Requests(); n != before {
		t.Fatalf("a second operation reached a BMC that was busy (%d requests, want %d)", n, before)
	}
	g.open()
	wantOK(t, <-first, `{"requested":"on"}`)
	wantOK(t, <-second, `{"power":"on"}`)
}

func TestDeadlineIsTimeout(t *testing.T) {
	s, g := startGated(t)
	tr := newTestRelay(t, func(c *Config) { c.Timeout = time.Second })
	start := time.Now()
	res := goDo(tr, rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`))
	waitEntered(t, g)
	r := <-res
	wantCode(t, r, relayerr.Timeout, "deadline")
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("a 1s deadline took %s", d)
	}
}

func TestWaitingForBMCIsBoundedByDeadline(t *testing.T) {
	s, g := startGated(t)
	tr := newTestRelay(t, nil)
	first := goDo(tr, rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`))
	waitEntered(t, g)
	before := s.Requests()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	wantCode(t, tr.Do(ctx, rfReq(s, "env://RF", "power.getPower", "")), relayerr.Timeout, "waiting for another operation")
	if s.Requests() != before {
		t.Error("the waiting operation reached the BMC")
	}
	g.open()
	wantOK(t, <-first, `{"requested":"on"}`)
}

func TestBusy(t *testing.T) {
	s, g := startGated(t)
	other := startRedfish(t, true)
	tr := newTestRelay(t, func(c *Config) { c.MaxOperations = 1 })
	first := goDo(tr, rfReq(s, "env://RF", "power.setPower", `{"state":"on"}`))
	waitEntered(t, g)
	before := other.Connections()
	wantCode(t, tr.do(t, rfReq(other, "env://RF", "power.getPower", "")), relayerr.Busy, "1 BMC operations")
	if other.Connections() != before {
		t.Error("a busy refusal connected to the BMC")
	}
	g.open()
	wantOK(t, <-first, `{"requested":"on"}`)
	wantOK(t, tr.do(t, rfReq(other, "env://RF", "power.getPower", "")), `{"power":"on"}`)
}
