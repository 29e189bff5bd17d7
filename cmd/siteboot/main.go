// Command siteboot is the siteboot appliance and its CLI: `siteboot serve`
// runs the appliance; every other command talks to a running appliance over
// its admin API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version and commit are set at build time (make build, make static):
// version from git describe, commit the short hash it was built from.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr, os.LookupEnv).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, stderrLine(err))
		os.Exit(1)
	}
}

// stderrLine is the line an error prints: a relay failure as it is (its
// code first, for scripts), anything else after "siteboot: ".
func stderrLine(err error) string {
	if rf, ok := errors.AsType[*relayFailure](err); ok {
		return rf.line
	}
	return "siteboot: " + errorLine(err)
}

// env reads the process environment; tests pass their own.
type env func(string) (string, bool)

func newRootCmd(stdout, stderr io.Writer, getenv env) *cobra.Command {
	cl := &clientOptions{getenv: getenv}
	root := &cobra.Command{
		Use:   "siteboot",
		Short: "siteboot: a site-local boot appliance (proxyDHCP, TFTP, iPXE, image cache)",
		Long: `siteboot answers PXE and HTTP boot requests only for machines it holds a
live boot entry for, serves their iPXE scripts, and manages those entries
through an admin API on a Unix socket.

Run the appliance with 'siteboot serve'; every other command talks to a
running appliance (--socket, or SITEBOOT_SOCKET).`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	cl.addFlags(root)
	root.AddCommand(
		newServeCmd(getenv),
		newEntryCmd(cl),
		newStatusCmd(cl),
		newDiscoveredCmd(cl),
		newScriptCmd(cl),
		newImageCmd(cl),
		newSiteCmd(cl),
		newAssertionCmd(cl),
		newClusterCmd(cl),
		newLeaseCmd(cl),
		newBmcCmd(cl),
		newProxyCmd(cl),
		newVersionCmd(cl),
		newHealthcheckCmd(getenv),
		newManCmd(getenv),
	)
	return root
}
