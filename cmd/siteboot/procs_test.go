package main

import (
	"bufio"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServeProcs(t *testing.T) {
	unset := func(string) (string, bool) { return "", false }
	set := func(k string) (string, bool) { return "3", k == "GOMAXPROCS" }
	empty := func(k string) (string, bool) { return "", k == "GOMAXPROCS" }
	for _, c := range []struct {
		name    string
		getenv  env
		current int
		want    int
	}{
		{"two CPUs", unset, 2, 4},
		{"one CPU", unset, 1, 2},
		{"operator's GOMAXPROCS", set, 3, 0},
		{"GOMAXPROCS set but empty", empty, 2, 4},
	} {
		if got := serveProcs(c.getenv, c.current, c.current); got != c.want {
			t.Errorf("%s: serveProcs(%d) = %d, want %d", c.name, c.current, got, c.want)
		}
	}
	// Under a CPU quota (the runtime chose 2 of 8 CPUs) serve leaves it.
	if got := serveProcs(unset, 2, 8); got != 0 {
		t.Errorf("under a quota: serveProcs(2 of 8 CPUs) = %d, want 0", got)
	}
}

// A running serve has twice the processors the runtime chose (unless a
// CPU quota bounds it), and keeps an operator's GOMAXPROCS as it is;
// /metrics says which.
func TestServeRaisesProcs(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want int
	}{
		{[]string{"GOMAXPROCS=1"}, 1},
		{[]string{"GOMAXPROCS=3"}, 3},
		// "GOMAXPROCS=" overrides one the test runner may export (the
		// child inherits os.Environ); empty is unset for Go and serve.
		{[]string{"GOMAXPROCS="}, 0}, // 2 × the child's own default, read from its log
	} {
		dir := t.TempDir()
		sock := filepath.Join(dir, "admin.sock")
		cmd := startServeEnv(t, c.env, "--data-dir", filepath.Join(dir, "data"), "--admin-socket", sock, "--http-listen", "127.0.0.1:0")
		waitSocket(t, sock)
		got := gomaxprocsMetric(t, "http://"+httpAddr(t, sock)+"/metrics")
		// The log is complete, and safe to read, once the child is gone.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		want := c.want
		if want == 0 {
			// Without GOMAXPROCS the child raised its own default: the
			// log line names both numbers.
			logs := cmd.Stdout.(interface{ String() string }).String()
			i := strings.Index(logs, "scheduler: Go processors raised")
			if i < 0 {
				// Only a CPU quota (the runtime's choice below the
				// machine's CPUs) keeps serve from raising it.
				if got >= runtime.NumCPU() {
					t.Fatalf("serve without GOMAXPROCS and without a CPU quota did not log the raise:\n%s", logs)
				}
				continue
			}
			line, _, _ := strings.Cut(logs[i:], "\n")
			cpus := intField(t, line, "cpus")
			if intField(t, line, "gomaxprocs") != 2*cpus {
				t.Fatalf("the raise is not 2 per CPU: %s", line)
			}
			want = 2 * cpus
		}
		if got != want {
			t.Errorf("GOMAXPROCS env %v: go_sched_gomaxprocs_threads = %d, want %d", c.env, got, want)
		}
	}
}

func gomaxprocsMetric(t *testing.T, url string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("go_sched_gomaxprocs_threads %q", v)
			}
			return n
		}
	}
	t.Fatal("/metrics has no go_sched_gomaxprocs_threads")
	return 0
}

// intField is the integer value of key=N in a text log line.
func intField(t *testing.T, line, key string) int {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s in %q", key, line)
			}
			return n
		}
	}
	t.Fatalf("no %s= in %q", key, line)
	return 0
}
