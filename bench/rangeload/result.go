package main

import (
	"slices"
	"time"
)

// Result is one run's outcome.
type Result struct {
	Label       string   `json:"label,omitempty"`
	URL         string   `json:"url"`
	Clients     int      `json:"clients"`
	RangeBytes  int64    `json:"range_bytes"`
	SizeBytes   int64    `json:"size_bytes"`
	ElapsedS    float64  `json:"elapsed_s"`
	Requests    uint64   `json:"requests"`
	OK          uint64   `json:"ok"`
	Bytes       uint64   `json:"bytes"`
	Verified    uint64   `json:"verified"`
	Errors      uint64   `json:"errors"`
	FirstErrors []string `json:"first_errors,omitempty"`
	MBPerS      float64  `json:"mb_per_s"`
	ReqPerS     float64  `json:"req_per_s"`
	Latency     Latency  `json:"latency"`
	ClientCPUS  float64  `json:"client_cpu_s"` // this load generator's own CPU time
}

// Latency summarises the successful requests, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// summarize merges the clients' counts.
func summarize(o options, size int64, elapsed time.Duration, stats []clientStats) Result {
	r := Result{Label: o.Label, URL: o.URL, Clients: o.Clients, RangeBytes: o.RangeSize,
		SizeBytes: size, ElapsedS: elapsed.Seconds()}
	var lat []time.Duration
	for i := range stats {
		s := &stats[i]
		r.Requests += s.requests
		r.Bytes += s.bytes
		r.Verified += s.verified
		r.Errors += s.errors
		if room := maxErrorsKept - len(r.FirstErrors); room > 0 {
			r.FirstErrors = append(r.FirstErrors, s.errs[:min(room, len(s.errs))]...)
		}
		lat = append(lat, s.lat...)
	}
	r.OK = uint64(len(lat))
	if secs := elapsed.Seconds(); secs > 0 {
		r.MBPerS = float64(r.Bytes) / 1e6 / secs
		r.ReqPerS = float64(r.OK) / secs
	}
	r.Latency = latency(lat)
	return r
}

// latency computes nearest-rank percentiles of d (sorted in place).
func latency(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	rank := func(p float64) float64 {
		i := max(int(p/100*float64(len(d))+0.999999)-1, 0)
		return ms(d[min(i, len(d)-1)])
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ms(d[len(d)-1]), Mean: ms(sum / time.Duration(len(d)))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
