package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Partitions are tc rules on the sending side's eth0, inside the lab's own
// namespaces: a root htb qdisc whose default class passes everything, and
// a class ending in a pfifo of length 0 that u32 filters steer the cut-off
// destinations into. Packets are dropped silently, as a broken switch
// port or cable does; ARP is untouched. (This kernel has no tc drop
// action, netem or flower, and there is no nft(8) here.)

// Partition directions.
const (
	cutBoth = "both" // neither way between the node and its peers
	cutOut  = "out"  // the node's packets to its peers are lost
	cutIn   = "in"   // its peers' packets to the node are lost
)

// dropClass is the htb class whose pfifo drops every packet.
const dropClass = "1:2"

// partition cuts node n off from the other appliances in dir; the probe
// still reaches every node, so a holder that failed to fence itself
// would be seen answering.
func (l *leaseLab) partition(n *leaseNode, dir string) error {
	ctx, cancel := context.WithTimeout(l.lab.Context(), 30*time.Second)
	defer cancel()
	for _, o := range l.nodes {
		if o == n {
			continue
		}
		if dir == cutBoth || dir == cutOut {
			if err := l.drop(ctx, n, o); err != nil {
				return err
			}
		}
		if dir == cutBoth || dir == cutIn {
			if err := l.drop(ctx, o, n); err != nil {
				return err
			}
		}
	}
	return l.checkCut(ctx, n, true)
}

// checkCut dials a peer's raft port from n: it must fail while n is cut
// off (in either direction a TCP handshake cannot complete) and succeed
// once healed, so a rule that did not take is noticed.
func (l *leaseLab) checkCut(ctx context.Context, n *leaseNode, cut bool) error {
	peer := l.nodes[0]
	if peer == n {
		peer = l.nodes[1]
	}
	var err error
	for try := 0; try < 10; try++ {
		err = n.host.Do(func() error {
			c, err := (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext(ctx, "tcp", peer.raft)
			if err == nil {
				c.Close()
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil // a reset came back: packets pass
			}
			return err
		})
		if cut == (err != nil) {
			return nil
		}
		if !cut { // the peer may be restarting
			sleep(ctx, 300*time.Millisecond)
		}
	}
	if cut {
		return fmt.Errorf("%s reaches %s's raft port %s through the partition", n.name, peer.name, peer.raft)
	}
	return fmt.Errorf("%s cannot reach %s's raft port %s after the heal: %w", n.name, peer.name, peer.raft, err)
}

// drop makes from's packets to to's address vanish.
func (l *leaseLab) drop(ctx context.Context, from, to *leaseNode) error {
	l.tcMu.Lock()
	defer l.tcMu.Unlock()
	if l.shaped == nil {
		l.shaped = map[*leaseNode]int{}
	}
	h := from.host
	if _, ok := l.shaped[from]; !ok {
		for _, args := range [][]string{
			{"qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"},
			{"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit", "quantum", "60000"},
			{"class", "add", "dev", "eth0", "parent", "1:", "classid", dropClass, "htb", "rate", "10gbit", "quantum", "60000"},
			{"qdisc", "add", "dev", "eth0", "parent", dropClass, "handle", "20:", "pfifo", "limit", "0"},
		} {
			if out, err := h.Run(ctx, "tc", args...); err != nil {
				return fmt.Errorf("tc on %s: %w: %s", from.name, err, out)
			}
		}
		l.shaped[from] = 0
	}
	out, err := h.Run(ctx, "tc", "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
		"u32", "match", "ip", "dst", to.host.Addr().String()+"/32", "classid", dropClass)
	if err != nil {
		return fmt.Errorf("tc filter on %s: %w: %s", from.name, err, out)
	}
	l.shaped[from]++
	return nil
}

// heal removes every partition.
func (l *leaseLab) heal() error {
	ctx, cancel := context.WithTimeout(l.lab.Context(), 30*time.Second)
	defer cancel()
	l.tcMu.Lock()
	var healed []*leaseNode
	for n, filters := range l.shaped {
		if filters == 0 {
			continue
		}
		if out, err := n.host.Run(ctx, "tc", "filter", "del", "dev", "eth0", "parent", "1:", "prio", "1"); err != nil {
			l.tcMu.Unlock()
			return fmt.Errorf("tc filter del on %s: %w: %s", n.name, err, out)
		}
		l.shaped[n] = 0
		healed = append(healed, n)
	}
	l.tcMu.Unlock()
	for _, n := range healed {
		if err := l.checkCut(ctx, n, false); err != nil {
			return err
		}
	}
	return nil
}
