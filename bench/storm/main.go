package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/siteboot/siteboot/bench/internal/pxe"
)

func main() {
	if os.Getenv(bulkEnv) == "1" {
		bulkMain()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "storm: %v\n", err)
		os.Exit(1)
	}
}

// errFailed reports a run in which some machine did not boot.
var errFailed = errors.New("machines failed to boot (see failures)")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.PrintMachines {
		ms, err := o.machines()
		if err != nil {
			return err
		}
		for _, m := range ms {
			fmt.Fprintf(stdout, "%s\t%s\t%s\n", m.MAC, m.uuidString(), m.kind())
		}
		return nil
	}
	conn, err := pxe.OpenSocket(ctx, o.DHCPListen, o.Iface)
	if err != nil {
		return err
	}
	defer conn.Close()
	var pxeConn net.PacketConn
	if o.PXEListen != "" {
		if pxeConn, err = pxe.OpenSocket(ctx, o.PXEListen, o.Iface); err != nil {
			return err
		}
		defer pxeConn.Close()
	}
	res, err := runStorm(ctx, o, conn, pxeConn)
	if err != nil {
		return err
	}
	if o.JSON {
		err = writeJSON(stdout, res)
	} else {
		err = writeTable(stdout, res)
	}
	if err == nil && res.Failed > 0 {
		err = fmt.Errorf("%d of %d: %w", res.Failed, res.Machines, errFailed)
	}
	return err
}

// bulkMain runs the process as the bulk worker of a storm (bulk.go).
func bulkMain() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err == nil {
		err = runBulkWorker(o, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "storm: %v\n", err)
		os.Exit(1)
	}
}
