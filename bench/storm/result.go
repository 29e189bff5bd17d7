package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run.
type Result struct {
	Label    string  `json:"label,omitempty"`
	Machines int     `json:"machines"`
	BIOS     int     `json:"bios"`
	UEFI     int     `json:"uefi"`
	UEFIHTTP int     `json:"uefi_http"`
	Done     int     `json:"done"`
	Failed   int     `json:"failed"`
	WindowS  float64 `json:"window_s"`
	RcvBuf   int     `json:"rcvbuf"`
	// CopyBodies: the client copied every body byte out of its sockets
	// (-copy-bodies, or a digest check); otherwise the kernel dropped them.
	CopyBodies bool `json:"copy_bodies"`
	// CompletionS is the first machine's start to the last initrd
	// complete, over the machines that finished.
	CompletionS float64 `json:"completion_s"`
	ElapsedS    float64 `json:"elapsed_s"` // the whole run, failures included
	// PerMachine is start to initrd complete, over the machines that finished.
	PerMachine      Dist            `json:"per_machine"`
	Steps           map[string]Dist `json:"steps"` // by step, over the machines that completed it; also kernel+initrd
	Failures        []Failure       `json:"failures,omitempty"`
	Bytes           int64           `json:"bytes"`
	DHCP            DHCPStats       `json:"dhcp"`
	TFTPRetransmits int             `json:"tftp_retransmits"`
	// ClientCPUS is this generator's own CPU time (user + system): when it
	// nears ElapsedS × cores, the generator, not the server, sets the pace.
	ClientCPUS  float64         `json:"client_cpu_s"`
	MachineList []MachineResult `json:"machine_list"`
}

// Dist is a distribution of durations in seconds (nearest-rank percentiles).
type Dist struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_s"`
	P99   float64 `json:"p99_s"`
	Max   float64 `json:"max_s"`
	Mean  float64 `json:"mean_s"`
}

// Failure counts the machines that failed at one step for one reason.
type Failure struct {
	Step    string `json:"step"`
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
	Example string `json:"example"` // the error of the first such machine
}

const stepKernelInitrd = "kernel+initrd"

func summarize(o options, ms []MachineResult, dhcp DHCPStats, elapsed time.Duration) Result {
	r := Result{Label: o.Label, Machines: len(ms), WindowS: o.Window.Seconds(), RcvBuf: o.RcvBuf,
		CopyBodies: o.copyBodies(),
		ElapsedS:   elapsed.Seconds(), DHCP: dhcp, MachineList: ms, Steps: map[string]Dist{}}
	var totals []float64
	steps := map[string][]float64{}
	fails := map[[2]string]*Failure{}
	firstStart, lastEnd := math.Inf(1), 0.0
	for _, m := range ms {
		switch m.Kind {
		case "bios":
			r.BIOS++
		case "uefi":
			r.UEFI++
		default:
			r.UEFIHTTP++
		}
		r.Bytes += m.Bytes
		r.TFTPRetransmits += m.TFTPRetransmits
		for _, s := range stepOrder {
			if d, ok := m.Steps[s]; ok && s != m.FailedStep {
				steps[s] = append(steps[s], d)
			}
		}
		if !m.Done {
			r.Failed++
			k := [2]string{m.FailedStep, m.Reason}
			if f := fails[k]; f != nil {
				f.Count++
			} else {
				fails[k] = &Failure{Step: m.FailedStep, Reason: m.Reason, Count: 1, Example: m.Error}
			}
			continue
		}
		r.Done++
		totals = append(totals, m.TotalS)
		steps[stepKernelInitrd] = append(steps[stepKernelInitrd], m.Steps[stepKernel]+m.Steps[stepInitrd])
		firstStart = min(firstStart, m.StartS)
		lastEnd = max(lastEnd, m.StartS+m.TotalS)
	}
	if r.Done > 0 {
		r.CompletionS = lastEnd - firstStart
	}
	r.PerMachine = dist(totals)
	for s, v := range steps {
		r.Steps[s] = dist(v)
	}
	for _, f := range fails {
		r.Failures = append(r.Failures, *f)
	}
	order := map[string]int{}
	for i, s := range stepOrder {
		order[s] = i
	}
	slices.SortFunc(r.Failures, func(a, b Failure) int {
		return cmp.Or(cmp.Compare(order[a.Step], order[b.Step]), cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
	})
	return r
}

func dist(v []float64) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 { return s[max(int(math.Ceil(p/100*float64(len(s))))-1, 0)] }
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{Count: len(s), P50: rank(50), P99: rank(99), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

func writeJSON(w io.Writer, res Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// writeTable prints the summary; the machine list is only in the JSON.
func writeTable(w io.Writer, res Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if res.Label != "" {
		fmt.Fprintf(tw, "run\t%s\n", res.Label)
	}
	win := "autotuned TCP windows"
	if res.RcvBuf > 0 {
		win = fmt.Sprintf("SO_RCVBUF %d", res.RcvBuf)
	}
	if !res.CopyBodies {
		win += ", http bodies dropped unread"
	}
	fmt.Fprintf(tw, "machines\t%d (%d bios, %d uefi, %d uefi-http), starts over %.1f s, %s\n",
		res.Machines, res.BIOS, res.UEFI, res.UEFIHTTP, res.WindowS, win)
	fmt.Fprintf(tw, "done\t%d of %d, %d failed\n", res.Done, res.Machines, res.Failed)
	fmt.Fprintf(tw, "completion\t%.3f s first start to last initrd (run %.3f s)\n", res.CompletionS, res.ElapsedS)
	p := res.PerMachine
	fmt.Fprintf(tw, "per machine\tp50 %.3f s  p99 %.3f s  max %.3f s\n", p.P50, p.P99, p.Max)
	fmt.Fprintf(tw, "bytes\t%d (%.1f MB)\n", res.Bytes, float64(res.Bytes)/1e6)
	d := res.DHCP
	fmt.Fprintf(tw, "dhcp\t%d sent (%d retransmits, %d requests to port 4011), %d replies, %d unmatched, %d malformed, %d dropped\n",
		d.Sent, d.Retransmits, d.Requests, d.Replies, d.Unmatched, d.Malformed, d.Dropped)
	fmt.Fprintf(tw, "tftp\t%d retransmits\n", res.TFTPRetransmits)
	fmt.Fprintf(tw, "client cpu\t%.2f s\n", res.ClientCPUS)
	fmt.Fprintf(tw, "\nstep\tcount\tp50 ms\tp99 ms\tmax ms\n")
	for _, s := range append(slices.Clone(stepOrder), stepKernelInitrd) {
		st := res.Steps[s]
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\n", s, st.Count, 1e3*st.P50, 1e3*st.P99, 1e3*st.Max)
	}
	if len(res.Failures) > 0 {
		fmt.Fprintf(tw, "\nfailed at\treason\tmachines\texample\n")
		for _, f := range res.Failures {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Step, f.Reason, f.Count, clip(f.Example))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
