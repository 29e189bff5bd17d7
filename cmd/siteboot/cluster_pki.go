package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// The files of a CA directory (init-ca) and of an appliance's certificate
// directory (issue-cert).
const (
	caCertFile   = "ca.pem"
	caKeyFile    = "ca.key"
	nodeCertFile = "cert.pem"
	nodeKeyFile  = "key.pem"
)

func newClusterInitCACmd() *cobra.Command {
	var name string
	var valid time.Duration
	c := &cobra.Command{
		Use:   "init-ca DIR",
		Short: "Create the site's raft CA (a P-256 key and a self-signed certificate) in DIR",
		Long: `Create DIR/ca.key (mode 0600) and DIR/ca.pem. Every appliance trusts the
CA as lease.raft.tls.ca, and any certificate it issues may take part in
raft and so write the site state: keep ca.key off the appliances, use this
CA for nothing else. Existing files are never overwritten.`,
		Example: `  siteboot cluster init-ca ./site-ca`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := initCA(args[0], name, valid, time.Now()); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "created %s and %s\n",
				filepath.Join(args[0], caCertFile), filepath.Join(args[0], caKeyFile))
			return err
		},
	}
	c.Flags().StringVar(&name, "name", "siteboot raft CA", "the CA certificate's common name")
	c.Flags().DurationVar(&valid, "valid", 10*365*24*time.Hour, "how long the CA certificate is valid")
	return c
}

func newClusterIssueCertCmd() *cobra.Command {
	var address, caDir, outDir string
	var valid time.Duration
	c := &cobra.Command{
		Use:   "issue-cert NODE --address HOST:PORT --ca DIR --out DIR",
		Short: "Issue an appliance's raft certificate (server and client auth) from the site CA",
		Long: `Issue a certificate for the appliance NODE (its common name) that names the
host of --address, its raft address, as an IP or DNS SAN, for server and
client authentication. It writes --out/cert.pem, --out/key.pem (mode 0600)
and a copy of the CA as --out/ca.pem: the three lease.raft.tls.* files.
Existing files are never overwritten.`,
		Example: `  siteboot cluster issue-cert appliance-1 --address 10.0.0.1:7390 --ca ./site-ca --out ./appliance-1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := issueCert(args[0], address, caDir, outDir, valid, time.Now()); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "issued %s for %s; set lease.raft.tls.ca: %s, cert: %s, key: %s\n",
				args[0], address, filepath.Join(outDir, caCertFile), filepath.Join(outDir, nodeCertFile), filepath.Join(outDir, nodeKeyFile))
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&address, "address", "", "the appliance's raft address, host:port (required)")
	f.StringVar(&caDir, "ca", "", "the directory init-ca wrote (required)")
	f.StringVar(&outDir, "out", "", "directory for cert.pem, key.pem and ca.pem (required; created if missing)")
	f.DurationVar(&valid, "valid", 2*365*24*time.Hour, "how long the certificate is valid")
	for _, name := range []string{"address", "ca", "out"} {
		_ = c.MarkFlagRequired(name)
	}
	return c
}

func initCA(dir, name string, valid time.Duration, now time.Time) error {
	if valid <= 0 {
		return errors.New("--valid: must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	return writeKeyAndCert(dir, caKeyFile, caCertFile, key, der)
}

func issueCert(node, address, caDir, outDir string, valid time.Duration, now time.Time) error {
	if err := checkNodeName(node); err != nil {
		return err
	}
	if valid <= 0 {
		return errors.New("--valid: must be positive")
	}
	host, err := raftHost(address)
	if err != nil {
		return err
	}
	ca, caKey, caPEM, err := loadCA(caDir)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: node},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(valid),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.NotAfter // a leaf outliving its CA verifies nowhere
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := sign(tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKeyAndCert(outDir, nodeKeyFile, nodeCertFile, key, der); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(outDir, caCertFile), caPEM, 0o644); err != nil {
		_ = os.Remove(filepath.Join(outDir, nodeKeyFile))
		_ = os.Remove(filepath.Join(outDir, nodeCertFile))
		return err
	}
	return nil
}

// checkNodeName accepts what the raft log accepts as a node id.
func checkNodeName(node string) error {
	if node == "" || len(node) > 128 {
		return fmt.Errorf("NODE: %q: a node id has 1 to 128 characters", node)
	}
	for i := range len(node) {
		if node[i] <= ' ' || node[i] > '~' {
			return fmt.Errorf("NODE: %q: a node id is printable ASCII without spaces", node)
		}
	}
	return nil
}

// raftHost is the host of a host:port raft address.
func raftHost(address string) (string, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", fmt.Errorf("--address: %q is not host:port: %v", address, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("--address: %q: the port is not 1 to 65535", address)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			return "", fmt.Errorf("--address: %q: name the address peers dial, not every address", address)
		}
		return ip.Unmap().String(), nil
	}
	if host == "" {
		return "", fmt.Errorf("--address: %q has no host", address)
	}
	return host, nil
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--ca: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--ca: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--ca: %s with %s: %w", caCertFile, caKeyFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !pair.Leaf.IsCA {
		return nil, nil, nil, fmt.Errorf("--ca: %s is not an ECDSA CA made by init-ca", dir)
	}
	return pair.Leaf, key, certPEM, nil
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

// writeKeyAndCert writes a new key (0600) and certificate into dir,
// refusing to replace either; a failure leaves neither behind.
func writeKeyAndCert(dir, keyName, certName string, key *ecdsa.PrivateKey, der []byte) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyPath, certPath := filepath.Join(dir, keyName), filepath.Join(dir, certName)
	for _, p := range []string{keyPath, certPath, filepath.Join(dir, caCertFile)} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists; refusing to overwrite it", p)
		}
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		_ = os.Remove(keyPath)
		return err
	}
	return nil
}

// writeNew creates path with data; it never replaces a file.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; refusing to overwrite it", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	return f.Close()
}
