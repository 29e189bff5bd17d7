package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dhcpload: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	macs, err := loadMACs(o)
	if err != nil {
		return err
	}
	if o.PrintMACs {
		for _, m := range macs {
			fmt.Fprintln(stdout, m)
		}
		return nil
	}
	conn, err := openSocket(ctx, o.Listen, o.Iface)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := runLoad(ctx, o, macs, conn)
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(stdout, res)
	}
	return writeTable(stdout, res)
}

func loadMACs(o options) ([]net.HardwareAddr, error) {
	if o.MACFile == "" {
		return generateMACs(o.MACPrefix, o.MACCount)
	}
	f, err := os.Open(o.MACFile)
	if err != nil {
		return nil, fmt.Errorf("mac file: %w", err)
	}
	defer f.Close()
	return parseMACs(f)
}

// runLoad builds the packets and runs the load on conn.
func runLoad(ctx context.Context, o options, macs []net.HardwareAddr, conn net.PacketConn) (Result, error) {
	spec, ds, err := o.specs()
	if err != nil {
		return Result{}, err
	}
	pkts := make([][]byte, len(macs))
	hw := make([][6]byte, len(macs))
	for i, m := range macs {
		if pkts[i], err = buildDiscover(m, ds); err != nil {
			return Result{}, err
		}
		hw[i] = [6]byte(m)
	}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	res, err := newRunner(spec, conn, pkts, hw, binary.BigEndian.Uint32(seed[:])).run(ctx)
	res.Label = o.Label
	return res, err
}

func (o options) specs() (loadSpec, discoverSpec, error) {
	target, err := net.ResolveUDPAddr("udp4", o.Server)
	if err != nil {
		return loadSpec{}, discoverSpec{}, fmt.Errorf("-server: %w", err)
	}
	spec := loadSpec{Target: target, Rate: o.Rate, Outstanding: o.Outstanding,
		Duration: o.Duration, Requests: o.Requests, Timeout: o.Timeout}
	if o.ServerID != "" {
		spec.ServerID = netip.MustParseAddr(o.ServerID)
	}
	ds := discoverSpec{Arch: uint16(o.Arch), VendorClass: o.VendorClass}
	if o.Giaddr != "" {
		ds.Giaddr = net.ParseIP(o.Giaddr).To4()
	}
	return spec, ds, nil
}
