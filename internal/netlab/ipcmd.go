package netlab

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ip runs ip(8), inside namespace ns when ns is not empty, bounded by the
// lab's command timeout.
func (l *Lab) ip(ns string, args ...string) error {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.CommandTimeout)
	defer cancel()
	err := runIP(ctx, ns, args...)
	l.logf("ip -n %q %s: %v", ns, strings.Join(args, " "), err)
	return err
}

// ipBatch runs several ip(8) commands in namespace ns, stopping at the first
// error.
func (l *Lab) ipBatch(ns string, cmds ...[]string) error {
	for _, c := range cmds {
		if err := l.ip(ns, c...); err != nil {
			return err
		}
	}
	return nil
}

func runIP(ctx context.Context, ns string, args ...string) error {
	full := args
	if ns != "" {
		full = append([]string{"-n", ns}, args...)
	}
	out, err := exec.CommandContext(ctx, "ip", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// namespacePIDs lists the processes living in namespace ns.
func namespacePIDs(ctx context.Context, ns string) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// deleteNamespace kills what still runs in ns (SIGKILL, waiting up to 5 s
// for it to go) and deletes it. Its own fresh context lets it run after the
// test's context has ended.
func deleteNamespace(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		pids, err := namespacePIDs(ctx, ns)
		if err != nil || len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := runIP(ctx, "", "netns", "del", ns); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	return nil
}
