package main

import (
	"math"
	"time"
)

// histogram records latencies in fixed buckets: 1 µs wide below 10 ms,
// 100 µs wide from 10 ms to 10 s; anything longer lands in the last one,
// which reports the exact max.
// Percentiles are bucket upper bounds; max and sum are exact.
type histogram struct {
	fine   [10_000]uint64
	coarse [99_900]uint64
	count  uint64
	sum    time.Duration
	max    time.Duration
}

const (
	fineWidth   = time.Microsecond
	fineLimit   = 10 * time.Millisecond
	coarseWidth = 100 * time.Microsecond
)

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.count++
	h.sum += d
	h.max = max(h.max, d)
	if d < fineLimit {
		h.fine[d/fineWidth]++
		return
	}
	i := min(int((d-fineLimit)/coarseWidth), len(h.coarse)-1)
	h.coarse[i]++
}

// percentile returns the latency at or below which p (0-100) per cent of
// the samples fall, or 0 with no samples.
func (h *histogram) percentile(p float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(p/100*float64(h.count))), 1)
	var seen uint64
	for i, n := range h.fine {
		if seen += n; seen >= rank {
			return min(time.Duration(i+1)*fineWidth, h.max)
		}
	}
	for i, n := range h.coarse[:len(h.coarse)-1] {
		if seen += n; seen >= rank {
			return min(fineLimit+time.Duration(i+1)*coarseWidth, h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return h.sum / time.Duration(h.count)
}
