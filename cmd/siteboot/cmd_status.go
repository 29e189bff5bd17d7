package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
)

func newStatusCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show what the appliance is, holds and whether it holds the boot lease",
		Long: `Show what the appliance is, holds and whether it holds the boot lease.
Unlike the other commands it answers while the appliance is starting (it
waits only for the socket), and then says why it is not ready yet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callStarting(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.GetStatusResponse, error) {
				return api.GetStatus(ctx, &sitebootv1.GetStatusRequest{})
			}, printStatus)
		},
	}
}

func printStatus(w io.Writer, st *sitebootv1.GetStatusResponse) error {
	t := newTable(w, "FIELD", "VALUE")
	lease := st.GetLease()
	t.row("site", st.GetSiteId())
	t.row("node", st.GetNodeId())
	t.row("version", st.GetVersion())
	t.row("started", st.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	if !st.GetReady() {
		t.row("ready", "no: "+st.GetNotReadyReason())
	}
	t.row("lease", fmt.Sprintf("active=%t epoch=%d ttl=%s mode=%s", lease.GetActive(), lease.GetEpoch(),
		time.Duration(lease.GetTtlMs())*time.Millisecond, st.GetLeaseMode()))
	if ls := st.GetLeaseStatus(); ls != nil && !ls.GetActive() {
		t.row("fenced", ls.GetFencedReason())
	}
	t.row("raft", fmt.Sprintf("%s applied=%d", st.GetRaftState(), st.GetAppliedIndex()))
	if st.GetReady() {
		t.row("entries", fmt.Sprintf("%d (%d live) for %d nodes", st.GetEntries(), st.GetLiveEntries(), st.GetNodes()))
		t.row("discovered", st.GetDiscovered())
	}
	t.row("node key", st.GetNodeKeyId())
	for _, l := range st.GetListeners() {
		t.row("listen "+l.GetService(), l.GetAddress())
	}
	if st.GetBootFilesDir() == "" {
		t.row("boot files", "none found (install Debian's ipxe package, or set boot_files.dir)")
	} else {
		t.row("boot files", st.GetBootFilesDir())
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printBootFiles(w, st.GetBootFiles())
}

// printBootFiles lists the boot files that are a default for some arch,
// with their digests; files served only by name are counted.
func printBootFiles(w io.Writer, files []*sitebootv1.BootFile) error {
	var byName int
	t := newTable(w, "\nBOOT FILE", "ARCH", "SIZE", "SHA256")
	for _, f := range files {
		if len(f.GetArches()) == 0 {
			byName++
			continue
		}
		t.row(f.GetName(), strings.Join(f.GetArches(), ","), f.GetSize(), hex.EncodeToString(f.GetSha256()))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if byName > 0 {
		_, err := fmt.Fprintf(w, "(and %d more served by name; -o json lists all)\n", byName)
		return err
	}
	return nil
}

func newVersionCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cl.output == "json" {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "{\n  \"version\": %q,\n  \"commit\": %q\n}\n", version, commit)
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "siteboot %s (commit %s)\n", version, commit)
			return err
		},
	}
}
