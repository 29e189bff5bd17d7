package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/siteboot/siteboot/internal/atomicfile"
)

// maxKeyFile bounds what LoadOrCreateKey reads; a PKCS#8 P-256 key in PEM is
// about 250 bytes.
const maxKeyFile = 16 << 10

// LoadOrCreateKey returns a Signer for the node key at path: a PEM
// "PRIVATE KEY" block (PKCS#8) holding an ECDSA P-256 key, mode 0600. A
// missing file is created atomically (written to a temporary file, synced,
// then linked into place, so a crash or a concurrent start never leaves a
// partial key); its directory is created 0700 when missing. A key file that
// group or others may access is refused, as is anything but a regular file.
func LoadOrCreateKey(path string) (*Signer, error) {
	s, err := loadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	if err := createKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Load what is in place now: ours, or the one a concurrent start linked
	// first.
	return loadKey(path)
}

func loadKey(path string) (*Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("discovery: node key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("discovery: node key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("discovery: node key %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("discovery: node key %s has mode %04o: group or others may access it; run chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("discovery: node key %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("discovery: node key %s is larger than %d bytes", path, maxKeyFile)
	}
	key, err := parsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("discovery: node key %s: %w", path, err)
	}
	return NewSigner(key)
}

func parsePrivateKeyPEM(data []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PRIVATE KEY (PKCS#8) block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS#8: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 key")
	}
	return key, nil
}

// createKey writes a fresh key to path; fs.ErrExist when path appeared in
// the meantime.
func createKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("discovery: generate node key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("discovery: encode node key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("discovery: node key dir: %w", err)
	}
	tmp, err := atomicfile.Temp(dir, ".nodekey-*.tmp", data)
	if err != nil {
		return fmt.Errorf("discovery: write node key: %w", err)
	}
	defer os.Remove(tmp)
	// Link, unlike rename, never replaces a key another process put there.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("discovery: install node key: %w", err)
	}
	return atomicfile.SyncDir(dir)
}
