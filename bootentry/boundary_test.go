package bootentry

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBootPathDoesNotSeeTheLog: the boot path (proxyDHCP, scripts, TFTP)
// reads entries through this package only, never the replicated log's
// messages.
func TestBootPathDoesNotSeeTheLog(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const mod = "github.com/siteboot/siteboot/"
	out, err := exec.CommandContext(ctx, goTool, "list", "-deps", mod+"dhcpproxy", mod+"ipxe", mod+"tftpd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 3 {
		t.Fatalf("go list -deps printed %q", out)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, mod+"gen/siteboot/state") || d == mod+"site" || d == mod+"lease" {
			t.Errorf("the boot path depends on %s", d)
		}
	}
}
