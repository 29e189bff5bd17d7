package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHistogram(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name    string
		samples []time.Duration
		want    []time.Duration // p50, p90, p99, max, mean
	}{
		{name: "empty", want: []time.Duration{0, 0, 0, 0, 0}},
		{name: "one sample", samples: []time.Duration{250 * us}, want: []time.Duration{250 * us, 250 * us, 250 * us, 250 * us, 250 * us}},
		{
			name:    "1..100 us",
			samples: seq(100, func(i int) time.Duration { return time.Duration(i+1)*us - 1 }),
			want:    []time.Duration{50 * us, 90 * us, 99 * us, 100*us - 1, 50*us + 499},
		},
		{
			name:    "coarse range",
			samples: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 3 * time.Second},
			want:    []time.Duration{20*time.Millisecond + 100*us, 3 * time.Second, 3 * time.Second, 3 * time.Second, 1013333333},
		},
		{name: "beyond range", samples: []time.Duration{time.Minute}, want: []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute, time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			for _, s := range tc.samples {
				h.record(s)
			}
			got := []time.Duration{h.percentile(50), h.percentile(90), h.percentile(99), h.max, h.mean()}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("histogram mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func seq(n int, f func(int) time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}
