package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siteboot/siteboot/bench/internal/pxe"
)

// dhcpMux shares one DHCP client socket among all machines: firmware of
// many machines on one LAN all listen on UDP 68 and tell their replies
// apart by xid and chaddr, and so does this.
type dhcpMux struct {
	conn   net.PacketConn
	target net.Addr

	mu      sync.Mutex
	waiters map[uint32]waiter

	sent, retransmits, replies     atomic.Uint64
	malformed, unmatched, wrongMAC atomic.Uint64
	dropped, readErrors            atomic.Uint64
	sendErrors                     atomic.Uint64
	stopping                       atomic.Bool
	done                           chan struct{}
}

type waiter struct {
	mac [6]byte
	ch  chan pxe.Reply
}

// DHCPStats is what the shared socket saw.
type DHCPStats struct {
	Sent        uint64 `json:"sent"`
	Retransmits uint64 `json:"retransmits"`
	Replies     uint64 `json:"replies"`
	Malformed   uint64 `json:"malformed"`
	Unmatched   uint64 `json:"unmatched"` // no machine waits on that xid (late or duplicate answers)
	WrongMAC    uint64 `json:"wrong_mac"`
	Dropped     uint64 `json:"dropped"` // a machine's queue was full
	SendErrors  uint64 `json:"send_errors"`
	ReadErrors  uint64 `json:"read_errors"`
}

func newDHCPMux(conn net.PacketConn, target net.Addr) *dhcpMux {
	m := &dhcpMux{conn: conn, target: target, waiters: make(map[uint32]waiter), done: make(chan struct{})}
	go m.receive()
	return m
}

// close stops the receiver; the caller closes the socket afterwards.
func (m *dhcpMux) close() {
	m.stopping.Store(true)
	_ = m.conn.SetReadDeadline(time.Now())
	<-m.done
}

func (m *dhcpMux) stats() DHCPStats {
	return DHCPStats{Sent: m.sent.Load(), Retransmits: m.retransmits.Load(), Replies: m.replies.Load(),
		Malformed: m.malformed.Load(), Unmatched: m.unmatched.Load(), WrongMAC: m.wrongMAC.Load(),
		Dropped: m.dropped.Load(), SendErrors: m.sendErrors.Load(), ReadErrors: m.readErrors.Load()}
}

func (m *dhcpMux) receive() {
	defer close(m.done)
	buf := make([]byte, 2048)
	for {
		n, _, err := m.conn.ReadFrom(buf)
		switch {
		case err == nil:
			m.deliver(buf[:n])
		case errors.Is(err, net.ErrClosed):
			return
		case errors.Is(err, os.ErrDeadlineExceeded) && m.stopping.Load():
			return
		default:
			m.readErrors.Add(1)
		}
	}
}

func (m *dhcpMux) deliver(pkt []byte) {
	rep, err := pxe.ParseReply(pkt)
	if err != nil {
		m.malformed.Add(1)
		return
	}
	m.replies.Add(1)
	m.mu.Lock()
	w, ok := m.waiters[rep.XID]
	m.mu.Unlock()
	switch {
	case !ok:
		m.unmatched.Add(1)
	case w.mac != rep.CHAddr:
		m.wrongMAC.Add(1)
	default:
		select {
		case w.ch <- rep:
		default:
			m.dropped.Add(1)
		}
	}
}

// errNoOffer is a DISCOVER exchange that ran out of retransmits.
var errNoOffer = errors.New("no proxy offer")

// exchange sends pkt (a DISCOVER with xid) and retransmits it after each
// of timeouts, as firmware does, until accept takes a reply or the
// timeouts run out. It returns the reply and the retransmits it needed.
func (m *dhcpMux) exchange(ctx context.Context, pkt []byte, xid uint32, mac [6]byte,
	timeouts []time.Duration, accept func(pxe.Reply) bool) (pxe.Reply, int, error) {
	ch := make(chan pxe.Reply, 8)
	m.mu.Lock()
	if _, dup := m.waiters[xid]; dup {
		m.mu.Unlock()
		return pxe.Reply{}, 0, fmt.Errorf("xid %08x already in use", xid)
	}
	m.waiters[xid] = waiter{mac: mac, ch: ch}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiters, xid)
		m.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var others int
	for try, d := range timeouts {
		if _, err := m.conn.WriteTo(pkt, m.target); err != nil {
			m.sendErrors.Add(1)
			return pxe.Reply{}, try, fmt.Errorf("send to %s: %w", m.target, err)
		}
		m.sent.Add(1)
		if try > 0 {
			m.retransmits.Add(1)
		}
		timer.Reset(d)
	wait:
		for {
			select {
			case rep := <-ch:
				if accept(rep) {
					return rep, try, nil
				}
				others++
			case <-timer.C:
				break wait
			case <-ctx.Done():
				return pxe.Reply{}, try, ctx.Err()
			}
		}
	}
	total := time.Duration(0)
	for _, d := range timeouts {
		total += d
	}
	return pxe.Reply{}, len(timeouts) - 1, fmt.Errorf("%w after %d DISCOVERs in %v (%d other replies)", errNoOffer, len(timeouts), total, others)
}
