package ipmisim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// envSocket names the Unix socket in the chassis program's environment.
const envSocket = "SITEBOOT_IPMISIM_CHASSIS"

// callTimeout bounds one chassis program call on both sides.
const callTimeout = 30 * time.Second

// call is what the chassis program sends; reply what it gets back.
type call struct {
	Args []string `json:"args"`
}

type reply struct {
	Stdout string `json:"stdout"`
	Error  string `json:"error,omitempty"`
}

// ChassisMain must be called first thing in TestMain of every package
// that starts a Sim. In the chassis program (the test binary re-executed
// by ipmi_sim through the wrapper script) it forwards the arguments to
// the Sim, prints the answer and exits; anywhere else it returns at once.
func ChassisMain() {
	sock := os.Getenv(envSocket)
	if sock == "" {
		return
	}
	var args []string
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-test.") {
			args = append(args, a)
		}
	}
	r, err := forward(sock, args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ipmisim chassis: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(r.Stdout)
	if r.Error != "" {
		fmt.Fprintf(os.Stderr, "ipmisim chassis: %s\n", r.Error)
		os.Exit(1)
	}
	os.Exit(0)
}

func forward(sock string, args []string) (reply, error) {
	var r reply
	c, err := net.DialTimeout("unix", sock, callTimeout)
	if err != nil {
		return r, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(callTimeout))
	if err := json.NewEncoder(c).Encode(call{Args: args}); err != nil {
		return r, err
	}
	err = json.NewDecoder(c).Decode(&r)
	return r, err
}

// listen opens the socket in Dir, or in a short temporary directory when
// Dir's path is too long for a Unix socket name.
func (s *Sim) listen() error {
	path := filepath.Join(s.cfg.Dir, "chassis.sock")
	if len(path) > 100 {
		d, err := os.MkdirTemp("", "ipmisim")
		if err != nil {
			return fmt.Errorf("ipmisim: %w", err)
		}
		s.tmpSock, path = d, filepath.Join(d, "chassis.sock")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("ipmisim: listen for the chassis program: %w", err)
	}
	s.ln = ln
	return nil
}

func (s *Sim) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(callTimeout))
			var in call
			if err := json.NewDecoder(bufio.NewReader(c)).Decode(&in); err != nil {
				return
			}
			out, err := s.handle(in.Args)
			r := reply{Stdout: out}
			if err != nil {
				r.Error = err.Error()
			}
			_ = json.NewEncoder(c).Encode(r)
		}()
	}
}

// handle runs one chassis program call: "get <parm>..." or
// "set <parm> <value> [<parm> <value>]...".
func (s *Sim) handle(args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("no arguments")
	}
	switch args[0] {
	case "get":
		return s.get(args[1:])
	case "set":
		if len(args) < 3 || len(args)%2 != 1 {
			return "", fmt.Errorf("set wants parameter/value pairs, got %q", args[1:])
		}
		for i := 1; i < len(args); i += 2 {
			if err := s.set(args[i], args[i+1]); err != nil {
				return "", err
			}
		}
		return "", nil
	}
	return "", fmt.Errorf("unknown verb %q", args[0])
}

func (s *Sim) get(parms []string) (string, error) {
	var b strings.Builder
	for _, p := range parms {
		switch p {
		case "power":
			on, err := s.cfg.Chassis.Power()
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "power:%d\n", b2i(on))
		case "boot":
			fmt.Fprintf(&b, "boot:%s\n", s.BootDevice())
		default:
			return "", fmt.Errorf("unknown parameter %q", p)
		}
	}
	return b.String(), nil
}

func (s *Sim) set(parm, value string) error {
	switch parm {
	case "power":
		if value != "0" && value != "1" {
			return fmt.Errorf("power value %q", value)
		}
		return s.cfg.Chassis.SetPower(value == "1")
	case "reset":
		return s.cfg.Chassis.Reset()
	case "shutdown":
		return s.cfg.Chassis.SetPower(false)
	case "boot":
		if err := s.cfg.Chassis.SetBootDevice(value); err != nil {
			return err
		}
		s.mu.Lock()
		s.boot = value
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("unknown parameter %q", parm)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
