package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel and initrd of every machine are fetched by a worker process
// of this program at a lower CPU priority (-bulk-nice): on real hardware
// each machine has its own CPU, and one machine's download never delays
// another machine's firmware. In one process on a few cores, the Go
// scheduler would run a machine's TFTP ACK or DHCP step behind a thousand
// goroutines reading HTTP bodies, and the run would measure the
// generator's own queue, not the server's answer.

// bulkEnv marks the process started as the worker.
const bulkEnv = "SITEBOOT_STORM_BULK_WORKER"

// bulkJob is one machine's downloads, sent to the worker as a JSON line.
type bulkJob struct {
	ID      int           `json:"id"`
	Src     string        `json:"src,omitempty"`
	Kernel  string        `json:"kernel,omitempty"`
	Initrds []string      `json:"initrds,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"` // what is left of the machine's deadline
	Cancel  bool          `json:"cancel,omitempty"`  // stop job ID
}

// bulkResult is what the worker did for a job.
type bulkResult struct {
	ID         int     `json:"id"`
	KernelS    float64 `json:"kernel_s"`
	InitrdS    float64 `json:"initrd_s"`
	Bytes      int64   `json:"bytes"`
	FailedStep string  `json:"failed_step,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// fetchKernelInitrd downloads a machine's kernel and initrds on client,
// as iPXE does, one after the other.
func fetchKernelInitrd(ctx context.Context, spec bootSpec, src netip.Addr, kernel string, initrds []string, buf []byte) bulkResult {
	client := newMachineClient(src, spec.HTTP, buf)
	defer client.CloseIdleConnections()
	var r bulkResult
	fail := func(step string, err error) bulkResult {
		r.FailedStep, r.Reason, r.Error = step, classify(err), err.Error()
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			r.Reason = classify(cause)
		}
		return r
	}
	t0 := time.Now()
	n, err := download(ctx, client, kernel, spec.KernelSHA256, buf)
	r.Bytes += n
	r.KernelS = time.Since(t0).Seconds()
	if err != nil {
		return fail(stepKernel, err)
	}
	t0 = time.Now()
	for _, u := range initrds {
		n, err := download(ctx, client, u, spec.InitrdSHA256, buf)
		r.Bytes += n
		if err != nil {
			r.InitrdS = time.Since(t0).Seconds()
			return fail(stepInitrd, err)
		}
	}
	r.InitrdS = time.Since(t0).Seconds()
	return r
}

// bulkWorker is the parent's end of the worker process.
type bulkWorker struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	enc  *json.Encoder
	done chan struct{} // closed when the result reader has stopped

	mu      sync.Mutex // guards enc's writes and waiting
	waiting map[int]chan bulkResult
	err     error // why the worker is gone
}

// startBulkWorker starts this program again as the worker, with the same
// flags, at the given nice value (raised above the parent's: no
// privilege needed).
func startBulkWorker(args []string, nice int) (*bulkWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bulk worker: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), bulkEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bulk worker: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bulk worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bulk worker: %w", err)
	}
	// Each thread has its own nice value: setting the process's (its
	// thread group leader's) right after the start covers the threads
	// its runtime starts later, which inherit it.
	if err := unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, nice); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("bulk worker: nice %d: %w", nice, err)
	}
	w := &bulkWorker{cmd: cmd, in: in, enc: json.NewEncoder(in), done: make(chan struct{}), waiting: map[int]chan bulkResult{}}
	go w.read(out)
	return w, nil
}

func (w *bulkWorker) read(out io.Reader) {
	defer close(w.done)
	dec := json.NewDecoder(bufio.NewReader(out))
	for {
		var r bulkResult
		err := dec.Decode(&r)
		w.mu.Lock()
		if err != nil {
			w.err = fmt.Errorf("bulk worker stopped: %w", err)
			for id, ch := range w.waiting {
				ch <- bulkResult{ID: id, FailedStep: stepKernel, Reason: "error", Error: w.err.Error()}
				delete(w.waiting, id)
			}
			w.mu.Unlock()
			return
		}
		if ch, ok := w.waiting[r.ID]; ok {
			ch <- r
			delete(w.waiting, r.ID)
		}
		w.mu.Unlock()
	}
}

// fetch has the worker download job's files and waits for the result;
// when ctx ends first, it tells the worker to stop and waits for that.
func (w *bulkWorker) fetch(ctx context.Context, job bulkJob) bulkResult {
	ch := make(chan bulkResult, 1)
	if d, ok := ctx.Deadline(); ok {
		job.Timeout = max(time.Until(d), time.Millisecond)
	}
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return bulkResult{ID: job.ID, FailedStep: stepKernel, Reason: "error", Error: w.err.Error()}
	}
	w.waiting[job.ID] = ch
	err := w.enc.Encode(job)
	w.mu.Unlock()
	if err != nil {
		w.mu.Lock()
		delete(w.waiting, job.ID)
		w.mu.Unlock()
		return bulkResult{ID: job.ID, FailedStep: stepKernel, Reason: "error", Error: "bulk worker: " + err.Error()}
	}
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
	}
	w.mu.Lock()
	_ = w.enc.Encode(bulkJob{ID: job.ID, Cancel: true})
	w.mu.Unlock()
	r := <-ch
	if r.Reason == "canceled" || r.Reason == "error" {
		r.Reason = classify(context.Cause(ctx))
	}
	return r
}

// close ends the worker once every job has answered and returns its CPU
// time.
func (w *bulkWorker) close() time.Duration {
	_ = w.in.Close()
	<-w.done
	_ = w.cmd.Wait()
	if st := w.cmd.ProcessState; st != nil {
		return st.UserTime() + st.SystemTime()
	}
	return 0
}

// runBulkWorker is the worker's main: jobs from stdin, results to stdout,
// every job in a goroutine of its own, until stdin ends and the jobs have
// answered.
func runBulkWorker(o options, stdin io.Reader, stdout io.Writer) error {
	spec := o.bootSpec()
	enc := json.NewEncoder(stdout)
	var mu sync.Mutex
	cancels := map[int]context.CancelFunc{}
	var wg sync.WaitGroup
	dec := json.NewDecoder(bufio.NewReader(stdin))
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	for {
		var job bulkJob
		if err := dec.Decode(&job); err != nil {
			wg.Wait()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("bulk worker: %w", err)
		}
		mu.Lock()
		if job.Cancel {
			if c := cancels[job.ID]; c != nil {
				c()
			}
			mu.Unlock()
			continue
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), job.Timeout, errMachineTimeout)
		if job.Timeout <= 0 {
			ctx, cancel = context.WithCancel(context.Background())
		}
		cancels[job.ID] = cancel
		mu.Unlock()
		src, _ := netip.ParseAddr(job.Src)
		wg.Go(func() {
			buf := bufs.Get().(*[]byte)
			r := fetchKernelInitrd(ctx, spec, src, job.Kernel, job.Initrds, *buf)
			bufs.Put(buf)
			r.ID = job.ID
			mu.Lock()
			cancel()
			delete(cancels, job.ID)
			_ = enc.Encode(r)
			mu.Unlock()
		})
	}
}
