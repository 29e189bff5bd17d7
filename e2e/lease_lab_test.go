package e2e

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/internal/netlab"
)

// raftPort is the raft port of every lease-lab appliance.
const raftPort = 7000

// leaseLabConfig is what a lease test chooses of its site.
type leaseLabConfig struct {
	// Cluster runs the three appliances as one raft cluster; false runs
	// three standalone appliances, each holding its own lease.
	Cluster bool
	// TTL and Margin are lease.ttl and lease.margin.
	TTL, Margin time.Duration
	// Disks puts each data dir on a loop-mounted ext4 file system that
	// the test can freeze (see loopdisk); the lab skips that when the
	// machine cannot.
	Disks bool
}

// leaseLab is three appliances on one LAN and a probe host.
type leaseLab struct {
	t     *testing.T
	cfg   leaseLabConfig
	lab   *netlab.Lab
	probe *netlab.Host
	nodes []*leaseNode
	// mac is the machine with a live ramdisk entry the probe boots as.
	mac string
	// diskReason is why data dirs are not freezable ("" when they are).
	diskReason string

	tcMu   sync.Mutex
	shaped map[*leaseNode]int // nodes with the partition qdisc: their drop filters
}

// leaseNode is one appliance of the lease lab, across its restarts.
type leaseNode struct {
	l    *leaseLab
	name string // node_id
	host *netlab.Host
	dir  string // config; its raft certificate in tls/
	data string // data_dir
	conf string
	base string // HTTP base URL
	raft string // raft address host:port
	sock string
	disk *loopDisk // nil unless Disks

	mu      sync.Mutex
	proc    *netlab.Process
	runs    int
	stopped bool // SIGSTOPped
	pub     *ecdsa.PublicKey
}

// newLeaseLab builds the LAN, starts the three appliances (waiting until
// each is ready) and adds the probe machine's entry.
func newLeaseLab(t *testing.T, cfg leaseLabConfig) *leaseLab {
	t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.Margin == 0 {
		cfg.Margin = time.Second
	}
	l := &leaseLab{t: t, cfg: cfg, lab: netlab.New(t, netlab.Config{}), mac: netlab.RandomMAC().String()}
	l.probe = l.lab.AddHost("probe")
	for _, name := range []string{"a", "b", "c"} {
		h := l.lab.AddHost("node" + name)
		dir := filepath.Join(l.lab.Dir(), "node"+name)
		n := &leaseNode{l: l, name: "node" + name, host: h, dir: dir, data: filepath.Join(dir, "data"),
			conf: filepath.Join(dir, "siteboot.yaml"),
			base: fmt.Sprintf("http://%s:%d", h.Addr(), httpPort),
			raft: net.JoinHostPort(h.Addr().String(), fmt.Sprint(raftPort))}
		n.sock = filepath.Join(n.data, "siteboot.sock")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		l.nodes = append(l.nodes, n)
	}
	if cfg.Disks {
		l.diskReason = loopDiskMissing(t, l.lab.Dir())
		if l.diskReason == "" {
			for _, n := range l.nodes {
				n.disk = newLoopDisk(t, filepath.Join(n.dir, "disk.img"), filepath.Join(n.dir, "mnt"))
				n.data = filepath.Join(n.disk.mnt, "data")
				n.sock = filepath.Join(n.data, "siteboot.sock")
			}
		} else {
			t.Logf("lease lab: no blocked-disk fault: %s", l.diskReason)
		}
	}
	l.writeTLS()
	for _, n := range l.nodes {
		n.writeConfig()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(l.nodes))
	for i, n := range l.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l.addEntry()
	return l
}

// writeTLS makes the raft certificates the way an operator does: one site
// CA with `siteboot cluster init-ca`, then per node `siteboot cluster
// issue-cert` naming its raft address, into <node dir>/tls.
func (l *leaseLab) writeTLS() {
	ctx, cancel := context.WithTimeout(l.lab.Context(), time.Minute)
	defer cancel()
	ca := filepath.Join(l.lab.Dir(), "ca")
	if _, err := l.tool(ctx, "cluster", "init-ca", ca); err != nil {
		l.t.Fatal(err)
	}
	for _, n := range l.nodes {
		if _, err := l.tool(ctx, "cluster", "issue-cert", n.name, "--address", n.raft, "--ca", ca, "--out", n.tlsDir()); err != nil {
			l.t.Fatal(err)
		}
	}
}

// tool runs a siteboot command that needs no appliance (files only).
func (l *leaseLab) tool(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, sitebootBinary(l.t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("siteboot %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// tlsDir holds the node's lease.raft.tls files, as issue-cert names them.
func (n *leaseNode) tlsDir() string { return filepath.Join(n.dir, "tls") }

// writeConfig writes the node's siteboot.yaml.
func (n *leaseNode) writeConfig() {
	addr := n.host.Addr().String()
	probe := n.l.probe.Addr().String()
	lines := []string{
		"site_id: e2e-lease",
		"node_id: " + n.name,
		"data_dir: " + n.data,
		"http:",
		fmt.Sprintf("  listen: %s:%d", addr, httpPort),
		"dhcp:",
		"  enabled: true",
		"  interfaces: [" + netlab.Iface + "]",
		"tftp:",
		"  enabled: false",
		"  listen: \"\"",
		"ramdisk:",
		// The probe never fetches these; they make /ipxe a ramdisk script,
		// whose kernel line carries bc.assertion=.
		"  kernel: http://" + probe + ":8000/vmlinuz",
		"  initrd: http://" + probe + ":8000/initrd",
		"cache:",
		"  min_free: 1MiB",
		"lease:",
		"  ttl: " + n.l.cfg.TTL.String(),
	}
	if n.l.cfg.Cluster {
		var join []string
		for _, o := range n.l.nodes {
			if o != n {
				join = append(join, o.raft)
			}
		}
		lines = append(lines,
			"  mode: cluster",
			"  margin: "+n.l.cfg.Margin.String(),
		)
		lines = append(lines,
			"  raft:",
			"    bind: "+n.raft,
			"    advertise: "+n.raft,
			"    join: ["+strings.Join(join, ", ")+"]",
		)
	} else {
		lines = append(lines, "  raft:", "    bind: "+n.raft)
	}
	lines = append(lines,
		"    tls:",
		"      ca: "+filepath.Join(n.tlsDir(), "ca.pem"),
		"      cert: "+filepath.Join(n.tlsDir(), "cert.pem"),
		"      key: "+filepath.Join(n.tlsDir(), "key.pem"),
		"log:",
		"  level: debug",
		"  format: json",
		"",
	)
	if err := os.WriteFile(n.conf, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		n.l.t.Fatal(err)
	}
}

// readyTimeout bounds one appliance's start.
const readyTimeout = 30 * time.Second

// start runs `siteboot serve` and waits for its ready line; its log is
// <lab dir>/siteboot-<node>-<run>.log.
func (n *leaseNode) start() error {
	n.mu.Lock()
	n.runs++
	label := fmt.Sprintf("siteboot-%s-%d", n.name, n.runs)
	n.mu.Unlock()
	p := n.host.Start(label, sitebootBinary(n.l.t), "serve", "--config", n.conf)
	n.mu.Lock()
	n.proc, n.stopped = p, false
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.l.lab.Context(), readyTimeout)
	defer cancel()
	if _, err := p.WaitOutput(ctx, msgReady); err != nil {
		return fmt.Errorf("%s did not become ready: %w\n%s", n.name, err, tail(p.Output(), 4096))
	}
	if n.pub == nil {
		s, err := discovery.LoadOrCreateKey(filepath.Join(n.data, "node.key"))
		if err != nil {
			return fmt.Errorf("%s: node key: %w", n.name, err)
		}
		n.mu.Lock()
		n.pub = s.Public()
		n.mu.Unlock()
	}
	return nil
}

// process is the node's current run.
func (n *leaseNode) process() *netlab.Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// publicKey is the node's assertion key (its data dir's node.key).
func (n *leaseNode) publicKey() *ecdsa.PublicKey {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pub
}

// running reports whether the current run has not exited.
func (n *leaseNode) running() bool {
	select {
	case <-n.process().Done():
		return false
	default:
		return true
	}
}

// pid is the siteboot process itself: a descendant of the supervisor
// netlab started (unshare, then sh as pid 1 of its pid namespace, then
// ip netns exec, which execs siteboot).
func (n *leaseNode) pid() (int, error) {
	root := n.process().Pid()
	pid, err := descendant(root, "siteboot")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", n.name, err)
	}
	return pid, nil
}

// kill9 sends SIGKILL to siteboot and waits until its run has ended.
func (n *leaseNode) kill9() error {
	pid, err := n.pid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %w", n.name, pid, err)
	}
	select {
	case <-n.process().Done():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs 10 s after SIGKILL", n.name, pid)
	}
}

// pause sends SIGSTOP (stop) or SIGCONT (!stop) to siteboot.
func (n *leaseNode) pause(stop bool) error {
	pid, err := n.pid()
	if err != nil {
		return err
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("%v to %s (pid %d): %w", sig, n.name, pid, err)
	}
	n.mu.Lock()
	n.stopped = stop
	n.mu.Unlock()
	if stop {
		// Runs before the lab stops the process: a stopped siteboot would
		// sit out the whole SIGTERM grace.
		n.l.t.Cleanup(func() {
			if n.paused() {
				_ = n.pause(false)
			}
		})
	}
	return nil
}

// restart stops the current run (SIGTERM, as an operator's restart does)
// unless it already exited, and starts a new one.
func (n *leaseNode) restart() error {
	if n.paused() {
		if err := n.pause(false); err != nil {
			return err
		}
	}
	n.process().Stop()
	return n.start()
}

func (n *leaseNode) paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stopped
}

// logs are the JSON lines of every run so far, in order.
func (n *leaseNode) logs() []logLine {
	n.mu.Lock()
	runs := n.runs
	n.mu.Unlock()
	var out []logLine
	for i := 1; i <= runs; i++ {
		b, _ := os.ReadFile(filepath.Join(n.l.lab.Dir(), fmt.Sprintf("siteboot-%s-%d.log", n.name, i)))
		out = append(out, parseLog(string(b))...)
	}
	return out
}

// cli runs a client command against the node's admin socket.
func (n *leaseNode) cli(ctx context.Context, args ...string) ([]byte, error) {
	a := &appliance{t: n.l.t, bin: sitebootBinary(n.l.t), socket: n.sock}
	return a.cli(ctx, args...)
}

// addEntry gives the probe's MAC a live ramdisk entry: once, through a
// follower's socket, in a cluster (the write is forwarded and replicated);
// on every node when each is standalone.
func (l *leaseLab) addEntry() {
	ctx, cancel := context.WithTimeout(l.lab.Context(), time.Minute)
	defer cancel()
	targets := l.nodes
	if l.cfg.Cluster {
		targets = l.nodes[len(l.nodes)-1:] // any node; a follower two times in three
	}
	for _, n := range targets {
		if _, err := n.cli(ctx, "entry", "add", "--node-id", "probe-machine", "--mac", l.mac, "--ttl", "2h"); err != nil {
			l.t.Fatalf("%s: %v", n.name, err)
		}
	}
}

// index is n's position in l.nodes.
func (l *leaseLab) index(n *leaseNode) int {
	for i, o := range l.nodes {
		if o == n {
			return i
		}
	}
	return -1
}

// node returns the node named name.
func (l *leaseLab) node(name string) *leaseNode {
	for _, n := range l.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// byAddr maps the nodes' LAN addresses to their names.
func (l *leaseLab) byAddr() map[string]string {
	m := map[string]string{}
	for _, n := range l.nodes {
		m[n.host.Addr().String()] = n.name
	}
	return m
}

// descendant finds the process named comm among root's descendants.
func descendant(root int, comm string) (int, error) {
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscan(s[i+1:], &state, &ppid); err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if c, _ := os.ReadFile(filepath.Join("/proc", fmt.Sprint(p), "comm")); p != root && strings.TrimSpace(string(c)) == comm {
			return p, nil
		}
		queue = append(queue, children[p]...)
	}
	return 0, fmt.Errorf("no %s process under pid %d", comm, root)
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
