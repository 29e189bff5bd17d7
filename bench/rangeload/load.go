package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/siteboot/siteboot/bench/internal/proc"
)

// maxErrorsKept is how many error messages a run keeps for its report.
const maxErrorsKept = 5

// clientStats is what one client counts; only its goroutine writes it.
type clientStats struct {
	requests uint64
	bytes    uint64
	verified uint64
	errors   uint64
	errs     []string
	lat      []time.Duration
}

func (s *clientStats) fail(err error) {
	s.errors++
	if len(s.errs) < maxErrorsKept {
		s.errs = append(s.errs, err.Error())
	}
}

// newClient is an HTTP client with one keep-alive connection per load
// client and no compression.
func newClient(o options) *http.Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.Clients,
		MaxIdleConnsPerHost: o.Clients,
		MaxConnsPerHost:     o.Clients,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	return &http.Client{Transport: t, Timeout: o.Timeout}
}

// runLoad probes the URL, then runs the clients for the duration.
func runLoad(ctx context.Context, o options, client *http.Client) (Result, error) {
	size, err := probe(ctx, client, o.URL)
	if err != nil {
		return Result{}, err
	}
	slots := size / o.RangeSize
	if slots < 1 {
		return Result{}, fmt.Errorf("%s is %d bytes, shorter than one range of %d", o.URL, size, o.RangeSize)
	}
	var file *os.File
	if o.VerifyFile != "" {
		if file, err = openVerify(o.VerifyFile, size); err != nil {
			return Result{}, err
		}
		defer file.Close()
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	stats := make([]clientStats, o.Clients)
	cpu0, start := proc.CPU(), time.Now()
	end := start.Add(o.Duration)
	var wg sync.WaitGroup
	for i := range o.Clients {
		c := clientRun{fetcher: fetcher{client: client, url: o.URL, size: size, buf: make([]byte, o.RangeSize)},
			rnd: rand.New(rand.NewPCG(seed, uint64(i))), slots: slots, every: uint64(o.VerifyEvery), stats: &stats[i]}
		if file != nil {
			c.verify = &verifier{file: file, buf: make([]byte, o.RangeSize)}
		}
		wg.Go(func() { c.loop(ctx, end) })
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), proc.CPU()-cpu0
	client.CloseIdleConnections()
	res := summarize(o, size, elapsed, stats)
	res.ClientCPUS = cpu.Seconds()
	return res, nil
}

func openVerify(path string, size int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-verify: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != size {
		err = fmt.Errorf("-verify: %s is %d bytes, the URL %d", path, fi.Size(), size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// clientRun is one load client.
type clientRun struct {
	fetcher
	rnd    *rand.Rand
	slots  int64
	every  uint64
	verify *verifier
	stats  *clientStats
}

// loop fetches random ranges until end or ctx is done.
func (c *clientRun) loop(ctx context.Context, end time.Time) {
	for time.Now().Before(end) && ctx.Err() == nil {
		off := c.rnd.Int64N(c.slots) * int64(len(c.buf))
		t0 := time.Now()
		err := c.get(ctx, off)
		d := time.Since(t0)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return
		}
		c.stats.requests++
		if err != nil {
			c.stats.fail(err)
			continue
		}
		c.stats.bytes += uint64(len(c.buf))
		c.stats.lat = append(c.stats.lat, d)
		if c.verify != nil && c.stats.requests%c.every == 0 {
			if err := c.verify.check(off, c.buf); err != nil {
				c.stats.fail(err)
				continue
			}
			c.stats.verified++
		}
	}
}
