package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadReadsAndVerifies(t *testing.T) {
	path, data := writeBlob(t, 64*4096+100) // a partial last range is never asked
	o := testOptions(serveBytes(t, data))
	o.VerifyFile = path
	res, err := runLoad(context.Background(), o, newClient(o))
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		Size        int64
		Errors      uint64
		AllVerified bool
		BytesMatch  bool
		HasLatency  bool
		CPUCounted  bool
	}
	got := shape{Size: res.SizeBytes, Errors: res.Errors, AllVerified: res.Verified == res.OK && res.OK > 0,
		BytesMatch: res.Bytes == res.OK*4096, HasLatency: res.Latency.P50 > 0 && res.Latency.P99 >= res.Latency.P50,
		CPUCounted: res.ClientCPUS > 0}
	want := shape{Size: int64(len(data)), AllVerified: true, BytesMatch: true, HasLatency: true, CPUCounted: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s\nfirst errors: %q", diff, res.FirstErrors)
	}
}

func TestLoadCatchesWrongBytes(t *testing.T) {
	path, data := writeBlob(t, 8*4096)
	bad := bytes.Clone(data)
	for i := 100; i < len(bad); i += 4096 {
		bad[i] ^= 0xff // one wrong byte in every range
	}
	o := testOptions(serveBytes(t, bad))
	o.VerifyFile = path
	var out bytes.Buffer
	err := run(context.Background(), argsOf(o), &out, &out)
	if !errors.Is(err, errFailed) {
		t.Fatalf("run: %v, want errFailed; output:\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "body differs") {
		t.Errorf("report does not say the body differs:\n%s", out.String())
	}
}

func argsOf(o options) []string {
	return []string{"-url", o.URL, "-clients", strconv.Itoa(o.Clients), "-duration", o.Duration.String(),
		"-range", strconv.FormatInt(o.RangeSize, 10), "-verify", o.VerifyFile, "-verify-every", "1"}
}

// TestLoadRejectsBadAnswers: every answer that is not the exact 206 asked
// for is counted as an error.
func TestLoadRejectsBadAnswers(t *testing.T) {
	_, data := writeBlob(t, 8*4096)
	size := strconv.Itoa(len(data))
	tests := []struct {
		name string
		get  http.HandlerFunc
		want string
	}{
		{"whole file", func(w http.ResponseWriter, _ *http.Request) { w.Write(data) }, "want 206"},
		{"other range", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Range", "bytes 0-4095/"+size)
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:4096])
		}, "Content-Range"},
		{"other size", func(w http.ResponseWriter, r *http.Request) {
			first, _ := strconv.Atoi(strings.TrimSuffix(strings.Split(strings.TrimPrefix(r.Header.Get("Range"), "bytes="), "-")[0], ""))
			w.Header().Set("Content-Range", "bytes "+strconv.Itoa(first)+"-"+strconv.Itoa(first+4095)+"/99999999")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[first : first+4096])
		}, "Content-Range"},
		{"garbage range", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Range", "bytes banana")
			w.WriteHeader(http.StatusPartialContent)
		}, "malformed Content-Range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead {
					w.Header().Set("Accept-Ranges", "bytes")
					w.Header().Set("Content-Length", size)
					return
				}
				tt.get(w, r)
			})
			o := testOptions(url)
			o.Duration = 50 * time.Millisecond
			res, err := runLoad(context.Background(), o, newClient(o))
			if err != nil {
				t.Fatal(err)
			}
			got := struct {
				AllFailed bool
				Says      bool
			}{res.Errors == res.Requests && res.Requests > 0 && res.OK == 0,
				len(res.FirstErrors) > 0 && strings.Contains(res.FirstErrors[0], tt.want)}
			if diff := cmp.Diff(struct{ AllFailed, Says bool }{true, true}, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nerrors: %q", diff, res.FirstErrors)
			}
		})
	}
}

func TestProbeRefuses(t *testing.T) {
	tests := []struct {
		name string
		head http.HandlerFunc
		want string
	}{
		{"not found", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }, "404"},
		{"no ranges", func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Content-Length", "8192") }, "Accept-Ranges"},
		{"empty", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Length", "0")
		}, "Content-Length"},
		{"shorter than a range", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Length", "100")
		}, "shorter than one range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(serveFunc(t, tt.head))
			_, err := runLoad(context.Background(), o, newClient(o))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("runLoad error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestVerifyFileMustMatchSize(t *testing.T) {
	path, data := writeBlob(t, 8*4096)
	o := testOptions(serveBytes(t, data[:4*4096]))
	o.VerifyFile = path
	_, err := runLoad(context.Background(), o, newClient(o))
	if err == nil || !strings.Contains(err.Error(), "-verify") {
		t.Errorf("runLoad error %v, want a -verify size error", err)
	}
}
