package images

import (
	"crypto/sha256"
	"encoding/binary"
	"github.com/siteboot/siteboot/internal/logbuf"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peImage returns a minimal PE image of the machine type, padded with
// deterministic noise to size bytes.
func peImage(machine uint16, size int) []byte {
	b := noise(size, uint64(machine))
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x80)
	copy(b[0x80:], "PE\x00\x00")
	binary.LittleEndian.PutUint16(b[0x84:], machine)
	return b
}

func noise(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(size)))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Typical contents for test trees.
var (
	amd64EFI = peImage(machineAMD64, 9000)
	arm64EFI = peImage(machineARM64, 7000)
	i386EFI  = peImage(machineI386, 5000)
	thumbEFI = peImage(machineThumb, 4000)
	kpxe     = noise(3000, 1)
)

// writeTree creates files (slash names relative to dir) with the given
// contents.
func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newLogger() (*slog.Logger, *logbuf.Buffer) {
	lb := &logbuf.Buffer{}
	return lb.Logger(), lb
}

// load loads dir with cfg (Dir and Logger filled in) and closes the set at
// the end of the test.
func load(t *testing.T, dir string, cfg Config) (*Set, *logbuf.Buffer) {
	t.Helper()
	log, lb := newLogger()
	cfg.Dir, cfg.Logger = dir, log
	s, err := Load(cfg)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, lb
}

// defaults returns BootFile for every arch that has one.
func defaults(s *Set) map[string]string {
	out := map[string]string{}
	for _, a := range Arches() {
		if n, ok := s.BootFile(a); ok {
			out[a] = n
		}
	}
	return out
}

func names(fs []File) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

func digest(b []byte) [32]byte { return sha256.Sum256(b) }
