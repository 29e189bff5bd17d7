package imagecache

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkPull measures a whole pull (download, hash, write, commit) of a
// 64 MiB image from a loopback origin.
func BenchmarkPull(b *testing.B) {
	data := testBytes(100, 64<<20)
	d := digestOf(data)
	srv := newBenchOrigin(b, data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c, err := Open(Config{Dir: b.TempDir(), Metrics: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Add(Want{URL: srv + "/img", SHA256: d}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		if err := c.Wait(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		cancel()
		<-done
		c.Close()
	}
}

// BenchmarkServeRanges reads random 1 MiB ranges of a 64 MiB image with
// parallel clients over loopback.
func BenchmarkServeRanges(b *testing.B) {
	data := testBytes(101, 64<<20)
	d := digestOf(data)
	origin := newBenchOrigin(b, data)
	c, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.Add(Want{URL: origin + "/img", SHA256: d})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	c.Wait(context.Background(), d)
	cancel()
	<-done
	srv, client := benchServer(b, c)
	b.SetBytes(1 << 20)
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			s := rng.IntN(len(data) - 1<<20)
			req, _ := http.NewRequest("GET", srv+URLPath(d), nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", s, s+1<<20-1))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
