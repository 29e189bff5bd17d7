package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadOrCreateKeyCreatesAndPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "node.key")
	s1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode = %04o, want 0600", got)
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if got := di.Mode().Perm(); got != 0o700 {
		t.Errorf("key dir mode = %04o, want 0700", got)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("key file is not PEM PKCS#8:\n%s", data)
	}
	s2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s1.KID(), s2.KID()); diff != "" {
		t.Fatalf("kid changed across reload (-first +second):\n%s", diff)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".nodekey-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestLoadOrCreateKeyConcurrentStartsAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.key")
	const n = 8
	kids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := LoadOrCreateKey(path)
			errs[i] = err
			if err == nil {
				kids[i] = s.KID()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if kids[i] != kids[0] {
			t.Fatalf("start %d got kid %s, start 0 got %s", i, kids[i], kids[0])
		}
	}
}

func pkcs8PEM(t *testing.T, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestLoadOrCreateKeyRefuses(t *testing.T) {
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sec1, _ := x509.MarshalECPrivateKey(p256)
	tests := []struct {
		name    string
		data    []byte
		mode    os.FileMode
		wantErr string
	}{
		{"group readable", pkcs8PEM(t, p256), 0o640, "group or others"},
		{"world readable", pkcs8PEM(t, p256), 0o644, "chmod 600"},
		{"group writable", pkcs8PEM(t, p256), 0o620, "group or others"},
		{"garbage", []byte("hello"), 0o600, "no PEM PRIVATE KEY"},
		{"empty", nil, 0o600, "no PEM PRIVATE KEY"},
		{"SEC1 not PKCS#8", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), 0o600, "no PEM PRIVATE KEY"},
		{"P-384", pkcs8PEM(t, p384), 0o600, "not an ECDSA P-256 key"},
		{"RSA", pkcs8PEM(t, rsaKey), 0o600, "not an ECDSA P-256 key"},
		{"truncated", pkcs8PEM(t, p256)[:100], 0o600, "no PEM PRIVATE KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.key")
			if err := os.WriteFile(path, tt.data, tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOrCreateKey(path)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("LoadOrCreateKey error = %v, want one containing %q", err, tt.wantErr)
			}
			after, _ := os.ReadFile(path)
			if diff := cmp.Diff(tt.data, after); diff != "" && len(tt.data) > 0 {
				t.Fatalf("refused key file was changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestLoadOrCreateKeyRefusesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.key")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("error = %v, want 'not a regular file'", err)
	}
}
