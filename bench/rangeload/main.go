package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rangeload: %v\n", err)
		os.Exit(1)
	}
}

// errFailed reports a run that completed with failed requests.
var errFailed = errors.New("some requests failed (see first_errors)")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	res, err := runLoad(ctx, o, newClient(o))
	if err != nil {
		return err
	}
	if o.JSON {
		err = writeJSON(stdout, res)
	} else {
		err = writeTable(stdout, res)
	}
	if err == nil && res.Errors > 0 {
		err = fmt.Errorf("%d of %d: %w", res.Errors, res.Requests, errFailed)
	}
	return err
}

func writeJSON(w io.Writer, res Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

func writeTable(w io.Writer, res Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if res.Label != "" {
		fmt.Fprintf(tw, "run\t%s\n", res.Label)
	}
	fmt.Fprintf(tw, "load\t%d clients, %d-byte ranges of %s (%d bytes)\n", res.Clients, res.RangeBytes, res.URL, res.SizeBytes)
	fmt.Fprintf(tw, "elapsed\t%.3f s\n", res.ElapsedS)
	fmt.Fprintf(tw, "requests\t%d ok, %d failed (%.0f/s)\n", res.OK, res.Errors, res.ReqPerS)
	fmt.Fprintf(tw, "throughput\t%.1f MB/s\n", res.MBPerS)
	fmt.Fprintf(tw, "verified\t%d answers byte for byte\n", res.Verified)
	fmt.Fprintf(tw, "client cpu\t%.2f s\n", res.ClientCPUS)
	l := res.Latency
	fmt.Fprintf(tw, "latency ms\tp50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P99, l.Max, l.Mean)
	if len(res.FirstErrors) > 0 {
		fmt.Fprintf(tw, "first errors\t%s\n", strings.Join(res.FirstErrors, "\n\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
