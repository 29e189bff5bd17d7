package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestREADMEClusterConfigs starts three appliances from the three config
// files the README shows, with certificates made by the README's commands;
// only what cannot be the same on a test machine is changed: the addresses
// move from 10.0.0.N to 127.0.0.N (one free port for all three), the
// certificate directory into the test's, and the data dir, admin socket
// and HTTP port come from the environment, as an operator could set them.
// The three must elect one holder and take a write through a follower.
func TestREADMEClusterConfigs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(# /etc/siteboot/siteboot.yaml on boot-[0-9]\n.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 3 {
		t.Fatalf("README shows %d cluster config files, want 3", len(blocks))
	}
	port := freeLoopbackPort(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "site-ca")
	mustCLI(t, "/nonexistent", "cluster", "init-ca", ca)
	apps := make([]*testAppliance, 3)
	for i, b := range blocks {
		n := i + 1
		certs := filepath.Join(dir, fmt.Sprintf("boot-%d", n))
		mustCLI(t, "/nonexistent", "cluster", "issue-cert", fmt.Sprintf("boot-%d", n),
			"--address", fmt.Sprintf("127.0.0.%d:%d", n, port), "--ca", ca, "--out", certs)
		text := regexp.MustCompile(`10\.0\.0\.([0-9]):7390`).ReplaceAllString(string(b[1]), "127.0.0.$1:"+strconv.Itoa(port))
		text = strings.ReplaceAll(text, "/etc/siteboot/raft/", certs+"/")
		file := filepath.Join(dir, fmt.Sprintf("boot-%d.yaml", n))
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{
			"SITEBOOT_DATA_DIR":     filepath.Join(dir, fmt.Sprintf("data-%d", n)),
			"SITEBOOT_HTTP_LISTEN":  "127.0.0.1:0",
			"SITEBOOT_DHCP_ENABLED": "false",
			"SITEBOOT_TFTP_ENABLED": "false",
		}
		cfg, err := loadConfig(file, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("README config of boot-%d: %v", n, err)
		}
		if err := cfg.Finish(); err != nil {
			t.Fatalf("README config of boot-%d: %v", n, err)
		}
		if cfg.NodeID != fmt.Sprintf("boot-%d", n) || cfg.Lease.Mode != "cluster" {
			t.Fatalf("README config %d: node_id %q, lease.mode %q", n, cfg.NodeID, cfg.Lease.Mode)
		}
		ctx, cancel := context.WithCancel(context.Background())
		apps[i] = &testAppliance{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
		go func() { apps[i].done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		t.Cleanup(apps[i].stop)
	}
	holder := waitHolderWithin(t, apps, -1, 40*time.Second)
	follower := (holder + 1) % 3
	mustCLI(t, apps[follower].cfg.Admin.Socket, "entry", "add", "--node-id", "node-1", "--mac", "52:54:00:ab:cd:01",
		"--script-url", "https://cp.example/ipxe/node-1")
	for i, a := range apps {
		for end := time.Now().Add(10 * time.Second); len(listJSON(t, a.cfg.Admin.Socket).Entries) != 1; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("boot-%d never saw the entry written through follower boot-%d", i+1, follower+1)
			}
		}
	}
	// An image added through a follower is pulled by every member on its
	// own, so the one that takes over finds it READY.
	iso := bytes.Repeat([]byte("siteboot cluster iso "), 20000)
	isoHex := hexDigest(iso)
	o := origin(t, map[string][]byte{"a.iso": iso})
	mustCLI(t, apps[follower].cfg.Admin.Socket, "image", "add", "--url", o.URL+"/a.iso", "--sha256", isoHex, "--format", "iso")
	for i, a := range apps {
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ls := mustCLI(t, a.cfg.Admin.Socket, "image", "ls")
			if imageLine(ls, isoHex[:16], "ready") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("boot-%d did not pull the image added through boot-%d:\n%s", i+1, follower+1, ls)
			}
		}
	}
	if got := leaseStatusJSON(t, apps[follower].cfg.Admin.Socket); len(got.Members) != 3 {
		t.Errorf("lease status on a follower lists %d members, want 3: %+v", len(got.Members), got.Members)
	}
}

// freeLoopbackPort is a TCP port free on 127.0.0.1, .2 and .3 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ok := true
		var others []net.Listener
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			others = append(others, l)
		}
		ln.Close()
		for _, l := range others {
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on 127.0.0.1-3")
	return 0
}

// imageLine reports whether a line of `image ls` holds both prefix and state.
func imageLine(ls, prefix, state string) bool {
	for _, line := range strings.Split(ls, "\n") {
		if strings.Contains(line, prefix) && strings.Contains(line, state) {
			return true
		}
	}
	return false
}
