package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"
)

// Caps that keep any run bounded, whatever the flags say.
const (
	maxDuration  = 10 * time.Minute
	maxClients   = 1024
	maxRangeSize = 64 << 20
	maxTimeout   = time.Minute
)

// options are the command-line flags.
type options struct {
	URL         string
	Clients     int
	Duration    time.Duration
	RangeSize   int64
	Timeout     time.Duration
	VerifyFile  string
	VerifyEvery int
	Seed        uint64
	Label       string
	JSON        bool
}

const usageHead = `rangeload: random aligned range reads of one URL by many keep-alive clients.

Examples:
  rangeload -url http://10.99.1.2:8080/cache/<hex> -clients 64 -duration 15s
  rangeload -url http://10.99.1.2:8082/cache/<hex> -verify /path/to/blob -json

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("rangeload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageHead); fs.PrintDefaults() }
	fs.StringVar(&o.URL, "url", "", "http URL of the file to read (required)")
	fs.IntVar(&o.Clients, "clients", 64, fmt.Sprintf("concurrent clients, one keep-alive connection each (max %d)", maxClients))
	fs.DurationVar(&o.Duration, "duration", 15*time.Second, fmt.Sprintf("how long to issue requests (max %v)", maxDuration))
	fs.Int64Var(&o.RangeSize, "range", 1<<20, fmt.Sprintf("bytes per range; ranges start at multiples of it (max %d)", maxRangeSize))
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, fmt.Sprintf("per-request timeout (max %v)", maxTimeout))
	fs.StringVar(&o.VerifyFile, "verify", "", "local copy of the file: compare sampled answers with it")
	fs.IntVar(&o.VerifyEvery, "verify-every", 16, "with -verify, compare one answer in this many (1: all)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed for the ranges (0: random)")
	fs.StringVar(&o.Label, "label", "", "name of the run, printed in the report")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate()
}

func (o options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	u, err := url.Parse(o.URL)
	check(err == nil && u.Scheme == "http" && u.Host != "", "-url %q: want an absolute http URL", o.URL)
	check(o.Clients >= 1 && o.Clients <= maxClients, "-clients %d: want 1..%d", o.Clients, maxClients)
	check(o.Duration > 0 && o.Duration <= maxDuration, "-duration %v: want (0, %v]", o.Duration, maxDuration)
	check(o.RangeSize >= 1 && o.RangeSize <= maxRangeSize, "-range %d: want 1..%d", o.RangeSize, maxRangeSize)
	check(o.Timeout > 0 && o.Timeout <= maxTimeout, "-timeout %v: want (0, %v]", o.Timeout, maxTimeout)
	check(o.VerifyEvery >= 1, "-verify-every %d: want at least 1", o.VerifyEvery)
	return errors.Join(errs...)
}
