package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Config tunes a Lab. The zero value is ready to use.
type Config struct {
	// Subnet is the lab's IPv4 /24. Default: 10.99.<n>.0/24 with a random n;
	// labs are isolated from each other, so equal subnets cannot collide.
	Subnet netip.Prefix
	// CommandTimeout bounds each ip(8) call and each Host.Run that has no
	// earlier deadline. Default 30s.
	CommandTimeout time.Duration
}

// Lab is one private LAN: a switch namespace with bridge br0, and hosts.
type Lab struct {
	t      testing.TB
	cfg    Config
	id     string
	dir    string
	lock   *os.File
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	hosts  []*Host
	taps   int
	spaces []string
}

// bridge is the name of the switch's bridge inside the switch namespace.
const bridge = "br0"

// New builds a lab (switch namespace and bridge) and registers its teardown
// with t.Cleanup. It first removes stale labs (CleanupStale). Call Require
// before New.
func New(t testing.TB, cfg Config) *Lab {
	t.Helper()
	cfg = cfg.withDefaults()
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() != 24 {
		t.Fatalf("netlab: subnet %s is not an IPv4 /24", cfg.Subnet)
	}
	if removed, err := CleanupStale(); err != nil {
		t.Logf("netlab: cleaning stale labs: %v", err)
	} else if len(removed) > 0 {
		t.Logf("netlab: removed stale namespaces %v", removed)
	}
	l := &Lab{t: t, cfg: cfg, dir: t.TempDir()}
	l.ctx, l.cancel = labContext(t)
	id, lock, err := claimID()
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	l.id, l.lock = id, lock
	t.Cleanup(l.teardown)
	if err := l.buildSwitch(); err != nil {
		t.Fatalf("netlab: %v", err)
	}
	t.Logf("netlab: lab %s on %s, logs in %s", l.id, cfg.Subnet, l.dir)
	return l
}

func (c Config) withDefaults() Config {
	if !c.Subnet.IsValid() {
		n, _ := rand.Int(rand.Reader, big.NewInt(254))
		c.Subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(n.Int64() + 1), 0}), 24)
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = 30 * time.Second
	}
	return c
}

// labContext ends 15 s before the test's deadline (or when the test ends), so
// waits give up in time for the cleanups to run.
func labContext(t testing.TB) (context.Context, context.CancelFunc) {
	tt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if ok {
		if d, has := tt.Deadline(); has {
			return context.WithDeadline(t.Context(), d.Add(-15*time.Second))
		}
	}
	return context.WithCancel(t.Context())
}

// ID is the lab's unique name prefix ("sbt-" and six hex digits).
func (l *Lab) ID() string { return l.id }

// Subnet is the lab's /24.
func (l *Lab) Subnet() netip.Prefix { return l.cfg.Subnet }

// Dir is the lab's scratch directory (logs, lease files, firmware copies).
func (l *Lab) Dir() string { return l.dir }

// Context ends shortly before the test's deadline; use it for every wait.
func (l *Lab) Context() context.Context { return l.ctx }

// SwitchNS is the name of the namespace holding the bridge (and the VMs).
func (l *Lab) SwitchNS() string { return l.id + "-sw" }

// Addr returns the lab address with host part n (1..254).
func (l *Lab) Addr(n int) netip.Addr {
	a := l.cfg.Subnet.Addr().As4()
	a[3] = byte(n)
	return netip.AddrFrom4(a)
}

func (l *Lab) buildSwitch() error {
	sw := l.SwitchNS()
	if err := l.addNamespace(sw); err != nil {
		return err
	}
	return l.ipBatch(sw,
		[]string{"link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		[]string{"link", "set", bridge, "up"},
	)
}

func (l *Lab) addNamespace(name string) error {
	if err := l.ip("", "netns", "add", name); err != nil {
		return err
	}
	l.mu.Lock()
	l.spaces = append(l.spaces, name)
	l.mu.Unlock()
	return l.ip(name, "link", "set", "lo", "up")
}

// teardown kills every process left in the lab's namespaces, deletes them
// (which removes their veths, taps and bridge) and releases the lock.
func (l *Lab) teardown() {
	l.cancel()
	l.mu.Lock()
	spaces := append([]string(nil), l.spaces...)
	l.mu.Unlock()
	for i := len(spaces) - 1; i >= 0; i-- {
		if err := deleteNamespace(spaces[i]); err != nil {
			l.t.Errorf("netlab: teardown: %v", err)
		}
	}
	releaseID(l.id, l.lock)
}

// logf writes a line to the lab's own log (lab.log in Dir).
func (l *Lab) logf(format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(l.dir, "lab.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
