package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/siteboot/siteboot/internal/ipmisim"
	"go.uber.org/goleak"
)

// built is the siteboot binary under test, built at most once per run
// into a temporary directory that TestMain removes.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	// When ipmi_sim runs this binary as its chassis program, it only
	// forwards that call to the test's simulated chassis and exits.
	ipmisim.ChassisMain()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
		os.Exit(code)
	}))
}

// sitebootBinary builds ./cmd/siteboot on first use and returns its path.
func sitebootBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "sbt-e2e-bin-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "siteboot")
		cmd := exec.Command("go", "build", "-o", built.path, "github.com/siteboot/siteboot/cmd/siteboot")
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build ./cmd/siteboot: %v\n%s", built.err, built.out)
	}
	return built.path
}
