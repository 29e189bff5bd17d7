package lease

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/site"
)

func TestCheckTransport(t *testing.T) {
	all := TLSFiles{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}
	tests := []struct {
		name   string
		bind   string
		tls    TLSFiles
		field  string // "" when accepted
		reason string
	}{
		{"no listener", "", TLSFiles{}, "", ""},
		{"loopback plain", "127.0.0.1:7390", TLSFiles{}, "", ""},
		{"loopback v6 plain", "[::1]:7390", TLSFiles{}, "", ""},
		{"loopback tls", "127.0.0.1:7390", all, "", ""},
		{"site address tls", "10.0.0.2:7390", all, "", ""},
		{"dns name tls", "raft1.site.example:7390", all, "", ""},
		{"site address plain", "10.0.0.2:7390", TLSFiles{}, "bind", "not a loopback address"},
		{"dns name plain", "localhost:7390", TLSFiles{}, "bind", "not a loopback address"},
		{"every address", "0.0.0.0:7390", all, "bind", "every address"},
		{"every address, no host", ":7390", all, "bind", "every address"},
		{"every address, v6", "[::]:7390", all, "bind", "every address"},
		// Go listens on [::] for it: every v4 and v6 address.
		{"every address, v4-mapped", "[::ffff:0.0.0.0]:7390", all, "bind", "every address"},
		{"loopback v4-mapped plain", "[::ffff:127.0.0.1]:7390", TLSFiles{}, "", ""},
		{"no port", "10.0.0.2", all, "bind", "missing port"},
		{"key missing", "10.0.0.2:7390", TLSFiles{CA: "ca.pem", Cert: "c.pem"}, "tls.key", "missing: tls.key"},
		{"ca missing", "127.0.0.1:7390", TLSFiles{Cert: "c.pem", Key: "k.pem"}, "tls.ca", "missing: tls.ca"},
		{"only ca", "", TLSFiles{CA: "ca.pem"}, "tls.cert", "missing: tls.cert, tls.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTransport(tt.bind, tt.tls)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("CheckTransport = %v; want accepted", err)
				}
				return
			}
			te, ok := errors.AsType[*TransportError](err)
			if !ok || te.Field != tt.field || !strings.Contains(te.Reason, tt.reason) {
				t.Fatalf("CheckTransport = %v; want a *TransportError on %s containing %q", err, tt.field, tt.reason)
			}
		})
	}
}

// TestOpenRefusesTransport: Open holds the same rule and checks the TLS
// files, refusing before it binds or touches the data dir.
func TestOpenRefusesTransport(t *testing.T) {
	ca := newTestCA(t, "site ca")
	good := ca.files(t, "appliance-1", leafOpts{})
	foreign := newTestCA(t, "another ca").files(t, "appliance-1", leafOpts{})
	clientOnly := ca.files(t, "appliance-1", leafOpts{usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	tests := []struct {
		name   string
		bind   string
		tls    TLSFiles
		field  string
		reason string
	}{
		{"site address without tls", "192.0.2.1:7390", TLSFiles{}, "bind", "not a loopback address"},
		{"partial tls", "127.0.0.1:0", TLSFiles{CA: good.CA, Cert: good.Cert}, "tls.key", "missing"},
		{"cert of another ca", "127.0.0.1:0", TLSFiles{CA: good.CA, Cert: foreign.Cert, Key: foreign.Key}, "tls.cert", "peers would refuse it"},
		{"cert for clients only", "127.0.0.1:0", clientOnly, "tls.cert", "peers would refuse it"},
		{"cert lacks the bind address", "127.0.0.2:0", good, "tls.cert", "does not name 127.0.0.2"},
		{"no ca file", "127.0.0.1:0", TLSFiles{CA: filepath.Join(t.TempDir(), "nope.pem"), Cert: good.Cert, Key: good.Key}, "tls.ca", "no such file"},
		{"key of another cert", "127.0.0.1:0", TLSFiles{CA: good.CA, Cert: good.Cert, Key: foreign.Key}, "tls.cert", "tls.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "raft")
			_, err := Open(Config{Dir: dir, ID: "appliance-1", Bind: tt.bind, TLS: tt.tls, StateMachine: site.NewState(), Logger: quietLog()})
			te, ok := errors.AsType[*TransportError](err)
			if !ok || te.Field != tt.field || !strings.Contains(te.Reason, tt.reason) {
				t.Fatalf("Open = %v; want a *TransportError on %s containing %q", err, tt.field, tt.reason)
			}
			if tt.field == "bind" {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Fatalf("the refused Open created the data dir (%v)", err)
				}
			}
		})
	}
}

// TestClusterPlainRaftStaysOnLoopback: without TLS every voter address must
// be loopback too, not only the bind address: an advertised site address
// would have the others reach a plain raft port from the network (through
// a port forward), and a plain join address would send the site state in
// clear to whoever answers there.
func TestClusterPlainRaftStaysOnLoopback(t *testing.T) {
	tests := []struct {
		name      string
		advertise string
		join      []string
		field     string
	}{
		{"advertised site address", "192.0.2.1:7390", []string{"127.0.0.1:7391", "127.0.0.1:7392"}, "advertise"},
		{"site address to join", "127.0.0.1:7390", []string{"127.0.0.1:7391", "192.0.2.3:7390"}, "join[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "raft")
			n, err := Open(Config{Mode: Cluster, Dir: dir, ID: "appliance-1", Bind: "127.0.0.1:0", Advertise: tt.advertise,
				Join: tt.join, StateMachine: site.NewState(), Logger: quietLog()})
			if err == nil {
				n.Close()
			}
			te, ok := errors.AsType[*TransportError](err)
			if !ok || te.Field != tt.field || !strings.Contains(te.Reason, "raft TLS is not configured") {
				t.Fatalf("Open = %v; want a *TransportError on %s saying raft TLS is not configured", err, tt.field)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("the refused Open created the data dir (%v)", err)
			}
		})
	}
}

// TestOpenRefusesATTLTooShortToRenew: the holder renews every ttl/3, so a
// ttl of a few nanoseconds is refused at Open rather than taken (it made
// Run panic on a ticker of 0).
func TestOpenRefusesATTLTooShortToRenew(t *testing.T) {
	for _, ttl := range []time.Duration{2 * time.Nanosecond, 99 * time.Millisecond} {
		n, err := Open(Config{Dir: t.TempDir(), ID: "appliance-1", TTL: ttl, StateMachine: site.NewState(), Logger: quietLog()})
		if err == nil {
			n.Close()
			t.Fatalf("Open with ttl %s succeeded; want a refusal", ttl)
		}
		if !strings.Contains(err.Error(), "TTL") {
			t.Fatalf("Open with ttl %s = %v; want an error naming the TTL", ttl, err)
		}
	}
}
