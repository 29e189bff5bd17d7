package ipmisim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config configures a simulated BMC.
type Config struct {
	// Dir is a scratch directory (t.TempDir()); required.
	Dir string
	// Addr is the address ipmi_sim listens on (default 127.0.0.1).
	Addr netip.Addr
	// Port is the UDP port (0: a free one on Addr, picked in the calling
	// process's network namespace).
	Port int
	// User and Password are the one administrator account (1..16
	// printable bytes, no quote, backslash or space); required.
	User, Password string
	// Chassis is the machine (nil: a new MemChassis, powered off).
	Chassis Chassis
	// Command builds the ipmi_sim process and the ipmitool that probes it
	// during Start (nil: exec.Command). A caller that runs ipmi_sim in
	// another network namespace runs both there.
	Command func(name string, args ...string) *exec.Cmd
}

// startTimeout bounds Start when ctx has no earlier deadline.
const startTimeout = 20 * time.Second

// Sim is a running ipmi_sim.
type Sim struct {
	cfg     Config
	addr    netip.AddrPort
	cmd     *exec.Cmd
	exited  chan struct{}
	output  *capBuffer
	ln      net.Listener
	tmpSock string // a short directory for the socket, removed on Close

	mu   sync.Mutex
	boot string // the boot device ipmi_sim last set (BMC state)

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start writes ipmi_sim's configuration into cfg.Dir, starts it and returns
// once ipmitool (lanplus, cipher suite 3) gets an answer from it.
func Start(ctx context.Context, cfg Config) (*Sim, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Chassis == nil {
		cfg.Chassis = &MemChassis{}
	}
	if cfg.Command == nil {
		cfg.Command = exec.Command
	}
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if cfg.Port == 0 {
		p, err := freeUDPPort(cfg.Addr)
		if err != nil {
			return nil, err
		}
		cfg.Port = p
	}
	s := &Sim{cfg: cfg, addr: netip.AddrPortFrom(cfg.Addr, uint16(cfg.Port)), boot: "default",
		exited: make(chan struct{}), output: &capBuffer{max: 64 << 10}}
	if err := s.listen(); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.serve()
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (c *Config) check() error {
	if c.Dir == "" {
		return errors.New("ipmisim: Config.Dir is required")
	}
	for name, v := range map[string]string{"User": c.User, "Password": c.Password} {
		if v == "" || len(v) > 16 || strings.ContainsAny(v, "\"\\ \t\r\n") {
			return fmt.Errorf("ipmisim: Config.%s must be 1..16 bytes without quotes, backslashes or spaces", name)
		}
		for _, r := range v {
			if r < 0x21 || r > 0x7e {
				return fmt.Errorf("ipmisim: Config.%s must be printable ASCII", name)
			}
		}
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("ipmisim: Config.Port %d out of range", c.Port)
	}
	return nil
}

// Addr is the address and UDP port ipmi_sim listens on.
func (s *Sim) Addr() netip.AddrPort { return s.addr }

// Chassis is the machine behind the BMC (the MemChassis Start made when
// Config.Chassis was nil).
func (s *Sim) Chassis() Chassis { return s.cfg.Chassis }

// BootDevice is the boot device the BMC holds (ipmi_sim's word).
func (s *Sim) BootDevice() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boot
}

// Output is what ipmi_sim wrote to stdout and stderr (capped).
func (s *Sim) Output() string { return s.output.String() }

// Close kills ipmi_sim (its whole process group), reaps it and stops
// serving the chassis program. It is safe to call more than once.
func (s *Sim) Close() error {
	s.closeOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		s.closeErr = s.ln.Close()
		s.wg.Wait()
		if s.tmpSock != "" {
			os.RemoveAll(s.tmpSock)
		}
	})
	return s.closeErr
}

func (s *Sim) start() error {
	dir := s.cfg.Dir
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("ipmisim: find test binary: %w", err)
	}
	files := map[string]string{
		"chassis.sh": wrapperScript(exe, s.ln.Addr().String()),
		"lan.conf":   lanConf(s.cfg, s.addr, filepath.Join(dir, "chassis.sh")),
		"cmds.emu":   emuFile,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o700); err != nil {
			return fmt.Errorf("ipmisim: %w", err)
		}
	}
	cmd := s.cfg.Command("ipmi_sim", "-c", filepath.Join(dir, "lan.conf"),
		"-f", filepath.Join(dir, "cmds.emu"), "-s", state, "-n")
	cmd.Stdout, cmd.Stderr = s.output, s.output
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ipmisim: start ipmi_sim: %w", err)
	}
	s.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	return nil
}

// waitReady polls with ipmitool until ipmi_sim answers, it exits, or ctx
// (at most startTimeout) ends.
func (s *Sim) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var last string
	for {
		out, err := s.probe(ctx)
		if err == nil {
			return nil
		}
		last = strings.TrimSpace(out)
		select {
		case <-s.exited:
			return fmt.Errorf("ipmisim: ipmi_sim exited: %s", strings.TrimSpace(s.Output()))
		case <-ctx.Done():
			return fmt.Errorf("ipmisim: ipmi_sim on %s did not answer (%s): %w", s.addr, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sim) probe(ctx context.Context) (string, error) {
	cmd := s.cfg.Command("ipmitool", "-I", "lanplus", "-C", "3", "-N", "1", "-R", "1",
		"-H", s.addr.Addr().String(), "-p", strconv.Itoa(int(s.addr.Port())),
		"-U", s.cfg.User, "-E", "mc", "info")
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, "IPMI_PASSWORD="+s.cfg.Password)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return out.String(), ctx.Err()
	}
}

func freeUDPPort(addr netip.Addr) (int, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		return 0, fmt.Errorf("ipmisim: pick a port on %s: %w", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *capBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
