package main

import (
	"context"
	"fmt"
	"io"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
)

func newClusterCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "List and change the raft members of the site; make the raft TLS certificates",
		Long: `In lease.mode cluster, three or five appliances form one raft group over
their lease.raft ports: the leader holds the boot lease, and every write is
forwarded to it, so these commands work on any member. 'members' is read
from this appliance's own copy of the log; 'join' and 'leave' change the
voters (cluster mode only).

'init-ca' and 'issue-cert' make the mutual TLS the raft ports require: one
CA for the site, one certificate per appliance naming its raft address.
They work on files and need no running appliance.`,
	}
	c.AddCommand(newClusterMembersCmd(cl), newClusterJoinCmd(cl), newClusterLeaveCmd(cl),
		newClusterInitCACmd(), newClusterIssueCertCmd())
	return c
}

func newClusterMembersCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the raft members, the leader, and the key each published",
		Long: `List the raft members as this appliance knows them, with the log index
the list was read at. NODE and KEY ID are what each member published through
the log (empty until it did): the kid of the key its assertions carry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.ListMembersResponse, error) {
				return api.ListMembers(ctx, &sitebootv1.ListMembersRequest{})
			}, func(w io.Writer, resp *sitebootv1.ListMembersResponse) error {
				if err := printMembers(w, resp.GetMembers()); err != nil {
					return err
				}
				_, err := fmt.Fprintf(w, "(read at applied index %d)\n", resp.GetAppliedIndex())
				return err
			})
		},
	}
}

func newClusterJoinCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "join ADDR",
		Short: "Add the appliance whose raft address is ADDR (host:port) as a voter",
		Long: `Add a voter by the raft address it advertises (lease.raft.advertise, or
lease.raft.bind). Start that appliance first, in cluster mode with an empty
data dir and a certificate from the site CA. Any member takes the command;
a follower forwards it to the leader.`,
		Example: `  siteboot cluster join 10.0.0.4:7390`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.AddMemberResponse, error) {
				return api.AddMember(ctx, &sitebootv1.AddMemberRequest{Address: args[0]})
			}, func(w io.Writer, resp *sitebootv1.AddMemberResponse) error { return printMembers(w, resp.GetMembers()) })
		},
	}
}

func newClusterLeaveCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "leave ADDR",
		Short: "Remove the member whose raft address is ADDR",
		Long: `Remove a member by its raft address, for an appliance taken out of
service. Keep three or five voters: with two or four, the cluster tolerates
no more failures than with one or three. Any member takes the command; a
follower forwards it to the leader.`,
		Example: `  siteboot cluster leave 10.0.0.4:7390`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.RemoveMemberResponse, error) {
				return api.RemoveMember(ctx, &sitebootv1.RemoveMemberRequest{Address: args[0]})
			}, func(w io.Writer, resp *sitebootv1.RemoveMemberResponse) error {
				return printMembers(w, resp.GetMembers())
			})
		},
	}
}

func printMembers(w io.Writer, ms []*sitebootv1.Member) error {
	t := newTable(w, "ADDRESS", "SERVER ID", "SUFFRAGE", "LEADER", "NODE", "KEY ID")
	for _, m := range ms {
		leader := ""
		if m.GetLeader() {
			leader = "yes"
		}
		t.row(m.GetAddress(), m.GetServerId(), m.GetSuffrage(), leader, m.GetNodeId(), m.GetKeyId())
	}
	return t.flush()
}
