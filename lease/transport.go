package lease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// TLSFiles are the PEM files of the raft transport's mutual TLS. All three
// are set, or none.
type TLSFiles struct {
	// CA is the bundle every peer's certificate must chain to. It should be
	// a CA that issues certificates to the site's appliances only: any
	// certificate it issued may take part in raft, and so write the site
	// state.
	CA string
	// Cert and Key are this appliance's certificate and key, presented to
	// peers both as a server and as a client. The certificate must name
	// the address peers dial (an IP or DNS SAN) and, when it lists
	// extended key usages, allow server and client authentication.
	Cert string
	Key  string
}

// Set reports whether any of the files is given.
func (f TLSFiles) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

func (f TLSFiles) missing() []string {
	var out []string
	for _, k := range []struct{ name, v string }{{"tls.ca", f.CA}, {"tls.cert", f.Cert}, {"tls.key", f.Key}} {
		if k.v == "" {
			out = append(out, k.name)
		}
	}
	return out
}

// TransportError is a raft transport setting that cannot run. Field names
// the setting relative to the raft settings: "bind", "tls.ca", "tls.cert"
// or "tls.key".
type TransportError struct {
	Field  string
	Reason string
}

func (e *TransportError) Error() string { return "lease: raft " + e.Field + ": " + e.Reason }

// CheckTransport holds the rule for the raft listener: a bind address that
// is not loopback needs mutual TLS, because whoever reaches the raft port
// can otherwise write the site state; plain TCP is allowed on a loopback
// address only (for tests), and TLS is given whole or not at all. It needs
// no file: Open loads and checks the files themselves.
func CheckTransport(bind string, files TLSFiles) error {
	if miss := files.missing(); files.Set() && len(miss) > 0 {
		return &TransportError{Field: miss[0], Reason: fmt.Sprintf(
			"is missing; raft TLS needs tls.ca, tls.cert and tls.key together (missing: %s)", strings.Join(miss, ", "))}
	}
	if bind == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		return &TransportError{Field: "bind", Reason: fmt.Sprintf("%q: %v", bind, err)}
	}
	ip, ipErr := netip.ParseAddr(host)
	if host == "" || (ipErr == nil && ip.Unmap().IsUnspecified()) {
		return &TransportError{Field: "bind", Reason: fmt.Sprintf(
			"%q listens on every address; raft needs the one address its peers dial (like 10.0.0.2:7390)", bind)}
	}
	if files.Set() {
		return nil
	}
	if ipErr == nil && ip.IsLoopback() {
		return nil
	}
	return &TransportError{Field: "bind", Reason: fmt.Sprintf(
		"%q is not a loopback address and raft TLS is not configured: whoever reaches a plain raft port can write "+
			"the site state and take the boot lease, so set tls.ca, tls.cert and tls.key (plain TCP raft is for tests, "+
			"on loopback only)", bind)}
}

// isLoopbackBind reports whether bind is a loopback IP literal with a port.
func isLoopbackBind(bind string) bool {
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// peerTLS is the loaded mutual TLS of the raft transport.
type peerTLS struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// errNoPeerCert: a peer completed no TLS client authentication.
var errNoPeerCert = errors.New("the peer presented no certificate")

// loadPeerTLS reads the files and checks that this appliance's own
// certificate is one its peers accept: chained to the CA, usable for both
// ends, and naming the address peers dial (bindHost).
func loadPeerTLS(f TLSFiles, bindHost string) (*peerTLS, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, &TransportError{Field: "tls.cert", Reason: fmt.Sprintf("with tls.key: %v", err)}
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, &TransportError{Field: "tls.ca", Reason: err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &TransportError{Field: "tls.ca", Reason: fmt.Sprintf("%s holds no PEM certificate", f.CA)}
	}
	p := &peerTLS{cert: cert, pool: pool}
	leaf := cert.Leaf
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := p.verify(cert.Certificate, usage); err != nil {
			return nil, &TransportError{Field: "tls.cert", Reason: fmt.Sprintf("peers would refuse it: %v", err)}
		}
	}
	if err := leaf.VerifyHostname(bindHost); err != nil {
		return nil, &TransportError{Field: "tls.cert", Reason: fmt.Sprintf("does not name %s, the address peers dial: %v", bindHost, err)}
	}
	return p, nil
}

// verify checks a presented chain (leaf first, DER) against the CA.
func (p *peerTLS) verify(chain [][]byte, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errNoPeerCert
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("peer certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: p.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// serverConfig accepts only clients whose certificate chains to the CA.
// The chain is checked in VerifyConnection rather than by crypto/tls
// itself so that a refusal says why (no certificate, unknown CA, …).
func (p *peerTLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.cert},
		ClientAuth:   tls.RequestClientCert,
		// Every connection is verified in full; raft keeps its connections
		// open, so resumption would save little.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				chain[i] = c.Raw
			}
			return p.verify(chain, x509.ExtKeyUsageClientAuth)
		},
	}
}

// clientConfig trusts only servers whose certificate chains to the CA and
// names serverName, the host of the address dialed.
func (p *peerTLS) clientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.cert},
		RootCAs:      p.pool,
		ServerName:   serverName,
	}
}
