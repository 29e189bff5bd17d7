package main

import (
	"fmt"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
)

func newStatusCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show what the appliance is, holds and whether it holds the boot lease",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, ctx, done, err := cl.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			st, err := api.GetStatus(ctx, &sitebootv1.GetStatusRequest{})
			if err != nil {
				return err
			}
			if cl.output == "json" {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return printStatus(cmd, st)
		},
	}
}

func printStatus(cmd *cobra.Command, st *sitebootv1.GetStatusResponse) error {
	t := newTable(cmd.OutOrStdout(), "FIELD", "VALUE")
	lease := st.GetLease()
	t.row("site", st.GetSiteId())
	t.row("node", st.GetNodeId())
	t.row("version", st.GetVersion())
	t.row("started", st.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	t.row("lease", fmt.Sprintf("active=%t epoch=%d ttl=%s mode=%s", lease.GetActive(), lease.GetEpoch(),
		time.Duration(lease.GetTtlMs())*time.Millisecond, st.GetLeaseMode()))
	t.row("raft", fmt.Sprintf("%s applied=%d", st.GetRaftState(), st.GetAppliedIndex()))
	t.row("entries", fmt.Sprintf("%d (%d live) for %d nodes", st.GetEntries(), st.GetLiveEntries(), st.GetNodes()))
	return t.flush()
}

func newVersionCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cl.output == "json" {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "{\n  \"version\": %q\n}\n", version)
				return err
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "siteboot", version)
			return err
		},
	}
}
