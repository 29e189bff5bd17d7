// Package monitortest counts the Go runtime's monitor thread's sleeps, for
// tests that show a hot path leaves it asleep (its wakeups cost a thread
// switch each; packages tftpd and internal/httpserver say why that
// matters).
package monitortest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Sleeps is how often the runtime's monitor thread (sysmon) of this
// process has gone to sleep so far: its voluntary context switches. sysmon is the first
// thread the runtime starts after the main one, so its thread ID is the
// next one after the process's, counting on past pid_max.
func Sleeps(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skipf("no per-thread counters here: %v", err)
	}
	pidMax := 1 << 22 // the kernel's limit, if pid_max does not say
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil && n > 0 {
			pidMax = n
		}
	}
	pid, tid := os.Getpid(), 0
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil || id == pid {
			continue
		}
		// Thread IDs are handed out in turn and wrap at pid_max.
		if tid == 0 || (id-pid+pidMax)%pidMax < (tid-pid+pidMax)%pidMax {
			tid = id
		}
	}
	if tid == 0 {
		t.Fatalf("/proc/self/task lists no thread but the main one; the runtime runs at least two")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("voluntary_ctxt_switches:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				t.Fatalf("status: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("thread %d's status has no voluntary_ctxt_switches:\n%s", tid, b)
	return 0
}
