package redfishsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Machine is what the service powers; nil: the state is only kept here.
type Machine interface {
	SetPower(on bool) error
	// Restart is a forced restart of a running machine.
	Restart() error
}

// Config configures a Server.
type Config struct {
	// User and Password are the one account; both required.
	User, Password string
	// Addr is the loopback address to listen on (default 127.0.0.1).
	Addr netip.Addr
	// PoweredOn is the initial power state.
	PoweredOn bool
	// Machine gets each power change (nil: none).
	Machine Machine
}

// State is the service's state.
type State struct {
	PowerOn       bool
	BootTarget    string // BootSourceOverrideTarget
	BootEnabled   string // BootSourceOverrideEnabled
	BootMode      string // BootSourceOverrideMode
	MediaInserted bool
	MediaImage    string
	Resets        []string // every accepted ResetType, in order
}

// Server is a running Redfish service.
type Server struct {
	cfg   Config
	srv   *httptest.Server
	spki  [32]byte
	conns atomic.Int64
	reqs  atomic.Int64

	mu       sync.Mutex
	state    State
	sessions map[string]string // token → session id
	nextID   int
}

// Start serves on Config.Addr (127.0.0.1) port 0 over TLS with a fresh self-signed
// certificate.
func Start(cfg Config) (*Server, error) {
	if cfg.User == "" || cfg.Password == "" {
		return nil, errors.New("redfishsim: Config.User and Config.Password are required")
	}
	cert, spki, err := selfSigned()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, spki: spki, sessions: make(map[string]string),
		state: State{PowerOn: cfg.PoweredOn, BootTarget: "None", BootEnabled: "Disabled", BootMode: "UEFI"}}
	routes := s.routes()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		routes.ServeHTTP(w, r)
	}))
	addr := cfg.Addr
	if !addr.IsValid() {
		addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return nil, fmt.Errorf("redfishsim: listen: %w", err)
	}
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Config.ReadHeaderTimeout = 10 * time.Second
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.StartTLS()
	return s, nil
}

// Addr is the address the service listens on.
func (s *Server) Addr() netip.AddrPort {
	return netip.MustParseAddrPort(s.srv.Listener.Addr().String())
}

// SPKISHA256 is the SHA-256 of the certificate's SubjectPublicKeyInfo.
func (s *Server) SPKISHA256() []byte { return append([]byte(nil), s.spki[:]...) }

// Connections counts the TCP connections accepted so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// Requests counts the HTTP requests received so far.
func (s *Server) Requests() int64 { return s.reqs.Load() }

// State returns a copy of the current state.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.Resets = append([]string(nil), s.state.Resets...)
	return st
}

// Sessions is the number of live sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close stops the service and closes its connections.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

func selfSigned() (tls.Certificate, [32]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("redfishsim: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "redfishsim BMC"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("redfishsim: certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("redfishsim: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		sha256.Sum256(leaf.RawSubjectPublicKeyInfo), nil
}
