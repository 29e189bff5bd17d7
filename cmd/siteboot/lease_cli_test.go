package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// leaseJSON is the shape of `lease status -o json` the tests read.
type leaseJSON struct {
	Mode         string `json:"mode"`
	Active       bool   `json:"active"`
	Epoch        string `json:"epoch"`
	TTLMs        int    `json:"ttlMs"`
	Holder       string `json:"holder"`
	ValidUntil   string `json:"validUntil"`
	FencedReason string `json:"fencedReason"`
	RaftState    string `json:"raftState"`
	FenceEvents  string `json:"fenceEvents"`
	Members      []struct {
		NodeID string `json:"nodeId"`
		KeyID  string `json:"keyId"`
		Leader bool   `json:"leader"`
	} `json:"members"`
}

func leaseStatusJSON(t *testing.T, sock string) leaseJSON {
	t.Helper()
	var got leaseJSON
	if err := json.Unmarshal([]byte(mustCLI(t, sock, "lease", "status", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// leaseTestConfig is testConfig without proxyDHCP and TFTP: these tests
// need the admin socket only.
func leaseTestConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.DHCP.Enabled, cfg.TFTP.Enabled = "false", "false"
	return cfg
}

func TestLeaseStatusStandalone(t *testing.T) {
	a := startAppliance(t, leaseTestConfig(t))
	sock := a.cfg.Admin.Socket
	out := mustCLI(t, sock, "lease", "status")
	for _, want := range []string{"mode", "standalone", "active", "true", "holder", "appliance-test", "valid_until", "(in ", "Leader applied="} {
		if !strings.Contains(out, want) {
			t.Errorf("lease status lacks %q:\n%s", want, out)
		}
	}
	got := leaseStatusJSON(t, sock)
	vu, err := time.Parse(time.RFC3339Nano, got.ValidUntil)
	if got.Mode != "standalone" || !got.Active || got.Epoch != "1" || got.TTLMs != 10000 || got.Holder != "appliance-test" ||
		err != nil || !vu.After(time.Now()) || vu.After(time.Now().Add(10*time.Second)) || got.FencedReason != "" {
		t.Fatalf("lease status -o json = %+v (valid_until %v)", got, err)
	}
	// The single voter lists itself, with the key it published (which takes
	// a moment after the lease).
	for end := time.Now().Add(5 * time.Second); len(got.Members) != 1 || got.Members[0].NodeID != "appliance-test" || got.Members[0].KeyID == ""; {
		if time.Now().After(end) {
			t.Fatalf("lease status members = %+v, want appliance-test with its key id", got.Members)
		}
		time.Sleep(50 * time.Millisecond)
		got = leaseStatusJSON(t, sock)
	}
	if !got.Members[0].Leader {
		t.Errorf("the single voter is not shown as leader: %+v", got.Members)
	}
	_, _, err = cli(t, sock, "lease", "set", "--epoch", "5", "--ttl", "10s")
	if line := errorLine(err); err == nil || !strings.Contains(line, "lease.mode is not external (FailedPrecondition)") {
		t.Fatalf("lease set in standalone mode: %q", line)
	}
	if got := leaseStatusJSON(t, sock); got.Epoch != "1" || !got.Active {
		t.Fatalf("a refused push changed the lease: %+v", got)
	}
}

// startExternal runs serve in lease.mode external and waits until it is
// ready (its gate stays closed until a push).
func startExternalAppliance(t *testing.T) *testAppliance {
	t.Helper()
	cfg := leaseTestConfig(t)
	cfg.Lease.Mode = "external"
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &testAppliance{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(a.stop)
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := getStatus(cfg.Admin.Socket); err == nil && st.GetReady() {
			return a
		}
		if time.Now().After(end) {
			t.Fatal("the external-mode appliance never became ready")
		}
	}
}

func TestLeaseSetExternal(t *testing.T) {
	a := startExternalAppliance(t)
	sock := a.cfg.Admin.Socket
	if got := leaseStatusJSON(t, sock); got.Active || got.Mode != "external" || !strings.Contains(got.FencedReason, "no lease pushed") {
		t.Fatalf("before the first push: %+v", got)
	}
	if out := mustCLI(t, sock, "status"); !strings.Contains(out, "active=false") || !strings.Contains(out, "no lease pushed") {
		t.Fatalf("status before the first push:\n%s", out)
	}

	out := mustCLI(t, sock, "lease", "set", "--epoch", "3", "--ttl", "5s")
	for _, want := range []string{"external", "true", "5s", "(in "} {
		if !strings.Contains(out, want) {
			t.Errorf("lease set output lacks %q:\n%s", want, out)
		}
	}
	if out := mustCLI(t, sock, "status"); !strings.Contains(out, "active=true epoch=3 ttl=5s mode=external") {
		t.Fatalf("status after the push:\n%s", out)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"lower epoch", []string{"--epoch", "2", "--ttl", "5s"}, "epoch 2 is below 3, the highest epoch pushed so far; epochs never go back (FailedPrecondition)"},
		{"ttl 0", []string{"--epoch", "3", "--ttl", "0s"}, "--ttl 0s: want 1ms to 10m0s"},
		{"ttl too long", []string{"--epoch", "3", "--ttl", "11m"}, "--ttl 11m0s: want 1ms to 10m0s"},
		{"epoch 0", []string{"--epoch", "0", "--ttl", "5s"}, "--epoch 0: epochs start at 1"},
		{"no epoch", []string{"--ttl", "5s"}, `required flag(s) "epoch" not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := cli(t, sock, append([]string{"lease", "set"}, tt.args...)...)
			if line := errorLine(err); err == nil || !strings.Contains(line, tt.want) || strings.Contains(line, "\n") {
				t.Fatalf("error line = %q; want one line containing %q", line, tt.want)
			}
			if got := leaseStatusJSON(t, sock); !got.Active || got.Epoch != "3" {
				t.Fatalf("a refused push changed the lease: %+v", got)
			}
		})
	}

	mustCLI(t, sock, "lease", "set", "--epoch", "3", "--ttl", "5s", "--inactive")
	got := leaseStatusJSON(t, sock)
	if got.Active || !strings.Contains(got.FencedReason, "active=false") || got.FenceEvents != "1" {
		t.Fatalf("after --inactive: %+v", got)
	}
}

func TestLeaseConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	three := "lease:\n  mode: cluster\n  ttl: 5s\n  raft:\n    bind: 127.0.0.1:7390\n    join: [127.0.0.1:7391, 127.0.0.1:7392]\n"
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string // "" for a config that passes
	}{
		{"three voters", three, nil, ""},
		{"five voters from env", "", map[string]string{"SITEBOOT_LEASE_MODE": "cluster", "SITEBOOT_LEASE_RAFT_BIND": "127.0.0.1:7390",
			"SITEBOOT_LEASE_RAFT_JOIN": "127.0.0.1:7391,127.0.0.1:7392,127.0.0.1:7393,127.0.0.1:7394"}, ""},
		{"external", "lease:\n  mode: external\n", nil, ""},
		{"unknown mode", "lease:\n  mode: leader\n", nil, `lease.mode: "leader": want standalone, cluster or external`},
		{"cluster without bind", "lease:\n  mode: cluster\n  raft:\n    join: [127.0.0.1:7391, 127.0.0.1:7392]\n", nil, "lease.raft.bind: is required with lease.mode cluster"},
		{"two voters", "lease:\n  mode: cluster\n  raft:\n    bind: 127.0.0.1:7390\n    join: [127.0.0.1:7391]\n", nil,
			"lease.raft.join: gives 2 voters: 2 voters stop when 1 fail, which tolerates no more failures than 1 voters; use 3 or 5"},
		{"four voters", "", map[string]string{"SITEBOOT_LEASE_MODE": "cluster", "SITEBOOT_LEASE_RAFT_BIND": "127.0.0.1:7390",
			"SITEBOOT_LEASE_RAFT_JOIN": "127.0.0.1:7391,127.0.0.1:7392,127.0.0.1:7393"}, "lease.raft.join: gives 4 voters"},
		{"no other voter", "lease:\n  mode: cluster\n  raft:\n    bind: 127.0.0.1:7390\n", nil, "lease.raft.join: lists no other voter"},
		{"bad join address", "lease:\n  mode: cluster\n  raft:\n    bind: 127.0.0.1:7390\n    join: [127.0.0.1:7391, nohost]\n", nil, "lease.raft.join[1]"},
		{"bind port 0 as advertise", "lease:\n  mode: cluster\n  raft:\n    bind: 127.0.0.1:0\n    join: [127.0.0.1:7391, 127.0.0.1:7392]\n", nil, "lease.raft.bind: \"127.0.0.1:0\": the port must be 1..65535"},
		{"bad advertise", "lease:\n  mode: cluster\n  raft:\n    bind: 127.0.0.1:7390\n    advertise: 0.0.0.0:7390\n    join: [127.0.0.1:7391, 127.0.0.1:7392]\n", nil, "lease.raft.advertise"},
		{"cluster ttl too short", strings.Replace(three, "ttl: 5s", "ttl: 1s", 1), nil, "lease.ttl: 1s: lease.mode cluster needs at least 2s"},
		{"standalone with join", "lease:\n  raft:\n    join: [127.0.0.1:7391, 127.0.0.1:7392]\n", nil, "lease.raft.join: lists other voters, but lease.mode standalone runs a single voter"},
		{"external with join", "lease:\n  mode: external\n  raft:\n    join: [127.0.0.1:7391]\n", nil, "lease.raft.join: lists other voters, but lease.mode external"},
		{"negative margin", "", map[string]string{"SITEBOOT_LEASE_MARGIN": "-1s"}, "lease.margin: must not be negative"},
		{"ttl too short to renew", "lease:\n  ttl: 2ns\n", nil, "lease.ttl: 2ns: must be at least 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, dir, "c.yaml", tt.yaml)
			cfg, err := loadConfig(file, envOf(tt.env))
			if err == nil {
				cfg.DataDir = dir
				err = cfg.Finish()
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("error = %v; want the config accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v; want containing %q", err, tt.want)
			}
		})
	}
}
