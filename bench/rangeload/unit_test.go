package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		name, in string
		want     contentRange
		wantErr  string
	}{
		{"ok", "bytes 0-1048575/1073741824", contentRange{0, 1048575, 1073741824}, ""},
		{"last byte", "bytes 9-9/10", contentRange{9, 9, 10}, ""},
		{"unknown size", "bytes 0-9/*", contentRange{}, "not a number"},
		{"past size", "bytes 0-10/10", contentRange{}, "outside"},
		{"reversed", "bytes 5-4/10", contentRange{}, "outside"},
		{"no unit", "0-4/10", contentRange{}, "unit"},
		{"negative", "bytes -1-4/10", contentRange{}, `"": want 1 to 18 digits`},
		{"spaces", "bytes 0 - 4/10", contentRange{}, "not a number"},
		{"huge", "bytes 0-1/99999999999999999999", contentRange{}, "digits"},
		{"empty", "", contentRange{}, "unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseContentRange(tt.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("range (-want +got):\n%s", diff)
			}
			if (tt.wantErr == "") != (err == nil) || !strings.Contains(gotErr, tt.wantErr) {
				t.Errorf("error %q, want one containing %q", gotErr, tt.wantErr)
			}
		})
	}
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("bytes 0-1048575/1073741824")
	f.Fuzz(func(t *testing.T, s string) {
		cr, err := parseContentRange(s)
		if err != nil {
			if cr != (contentRange{}) {
				t.Fatalf("error %v with a non-zero range %+v", err, cr)
			}
			return
		}
		if cr.First < 0 || cr.First > cr.Last || cr.Last >= cr.Size {
			t.Fatalf("accepted an impossible range %+v from %q", cr, s)
		}
	})
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"ok", []string{"-url", "http://10.0.0.2:8080/cache/x"}, ""},
		{"no url", nil, "-url"},
		{"https", []string{"-url", "https://x/y"}, "-url"},
		{"too many clients", []string{"-url", "http://x/y", "-clients", "5000"}, "-clients 5000"},
		{"too long", []string{"-url", "http://x/y", "-duration", "1h"}, "-duration 1h0m0s"},
		{"huge range", []string{"-url", "http://x/y", "-range", "1000000000"}, "-range"},
		{"verify every 0", []string{"-url", "http://x/y", "-verify-every", "0"}, "-verify-every"},
		{"extra arg", []string{"-url", "http://x/y", "more"}, "unexpected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if (tt.wantErr == "") != (err == nil) || !strings.Contains(gotErr, tt.wantErr) {
				t.Errorf("error %q, want one containing %q", gotErr, tt.wantErr)
			}
		})
	}
}

func TestLatencyPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := latency(d)
	want := Latency{P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("latency (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Latency{}, latency(nil)); diff != "" {
		t.Errorf("no samples (-want +got):\n%s", diff)
	}
}
