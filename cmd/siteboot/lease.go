package main

import (
	"context"
	"fmt"
	"io"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/lease"
	"github.com/spf13/cobra"
)

func newLeaseCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "lease",
		Short: "Show the boot lease, or push it (lease.mode external)",
	}
	c.AddCommand(newLeaseStatusCmd(cl), newLeaseSetCmd(cl))
	return c
}

func newLeaseStatusCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the boot lease as this appliance sees it: mode, active, epoch, holder, window and why it is fenced",
		Long: `Show the boot lease as this appliance sees it: the lease mode, whether it
answers now, the newest epoch it knows and who took it, until when its window
runs (valid_until), the raft leader and members, and why it does not answer
when it does not. Like 'status' it answers while the appliance starts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callStarting(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.LeaseStatus, error) {
				return api.GetLease(ctx, &sitebootv1.GetLeaseRequest{})
			}, printLease)
		},
	}
}

func newLeaseSetCmd(cl *clientOptions) *cobra.Command {
	var (
		epoch    uint64
		ttl      time.Duration
		inactive bool
	)
	c := &cobra.Command{
		Use:   "set --epoch N --ttl DUR [--inactive]",
		Short: "Push the boot lease (lease.mode external): epoch N for DUR, or fence at once with --inactive",
		Long: `Push the boot lease to an appliance in lease.mode external, as a control
plane does with UpdateLease. The appliance answers for --ttl from the moment
it receives the push and fences itself unless it is pushed again within that
time; the same epoch renews. An epoch lower than the highest ever pushed is
refused (also after a restart); --inactive fences at once. Other lease modes
refuse the push.`,
		Example: `  siteboot lease set --epoch 7 --ttl 30s
  siteboot lease set --epoch 7 --ttl 30s --inactive`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < time.Millisecond || ttl > lease.MaxExternalTTL {
				return fmt.Errorf("--ttl %s: want 1ms to %s", ttl, lease.MaxExternalTTL)
			}
			if epoch == 0 {
				return fmt.Errorf("--epoch 0: epochs start at 1")
			}
			ls := &sitev1.BootLeaseState{Active: !inactive, Epoch: epoch, TtlMs: uint32(ttl.Milliseconds())}
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.UpdateLeaseResponse, error) {
				return api.UpdateLease(ctx, &sitebootv1.UpdateLeaseRequest{Lease: ls})
			}, func(w io.Writer, resp *sitebootv1.UpdateLeaseResponse) error { return printLease(w, resp.GetStatus()) })
		},
	}
	c.Flags().Uint64Var(&epoch, "epoch", 0, "the lease epoch (at least the highest pushed so far)")
	c.Flags().DurationVar(&ttl, "ttl", 0, "how long the appliance may answer without another push (at most 10m)")
	c.Flags().BoolVar(&inactive, "inactive", false, "push active=false: the appliance stops answering at once")
	_ = c.MarkFlagRequired("epoch")
	_ = c.MarkFlagRequired("ttl")
	return c
}

func printLease(w io.Writer, ls *sitebootv1.LeaseStatus) error {
	t := newTable(w, "FIELD", "VALUE")
	t.row("mode", ls.GetMode())
	t.row("active", ls.GetActive())
	t.row("epoch", ls.GetEpoch())
	t.row("ttl", time.Duration(ls.GetTtlMs())*time.Millisecond)
	t.row("holder", ls.GetHolder())
	if vu := ls.GetValidUntil(); vu != nil {
		at := vu.AsTime()
		rel := "ended " + time.Since(at).Round(time.Millisecond).String() + " ago"
		if d := time.Until(at); d > 0 {
			rel = "in " + d.Round(time.Millisecond).String()
		}
		t.row("valid_until", at.Local().Format("2006-01-02T15:04:05.000Z07:00")+" ("+rel+")")
	} else {
		t.row("valid_until", "")
	}
	if !ls.GetActive() {
		t.row("fenced", ls.GetFencedReason())
	}
	t.row("leader", ls.GetLeader())
	t.row("raft", fmt.Sprintf("%s applied=%d", ls.GetRaftState(), ls.GetAppliedIndex()))
	t.row("fence events", ls.GetFenceEvents())
	if err := t.flush(); err != nil {
		return err
	}
	if len(ls.GetMembers()) == 0 {
		return nil
	}
	m := newTable(w, "\nMEMBER", "ADDRESS", "SUFFRAGE", "LEADER", "NODE", "KEY")
	for _, mb := range ls.GetMembers() {
		leader := ""
		if mb.GetLeader() {
			leader = "yes"
		}
		m.row(mb.GetServerId(), mb.GetAddress(), mb.GetSuffrage(), leader, mb.GetNodeId(), mb.GetKeyId())
	}
	return m.flush()
}
