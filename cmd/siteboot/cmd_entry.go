package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func newEntryCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "entry",
		Short: "Manage boot entries (the machines this appliance answers for)",
	}
	c.AddCommand(newEntryAddCmd(cl), newEntryLsCmd(cl), newEntryRmCmd(cl))
	return c
}

type entryAddFlags struct {
	nodeID, uuid, arch, bootFile, scriptURL, workflowID string
	notAfter, tokenRef, sanboot                         string
	macs                                                []string
	ttl                                                 time.Duration
}

func newEntryAddCmd(cl *clientOptions) *cobra.Command {
	var f entryAddFlags
	c := &cobra.Command{
		Use:   "add --node-id ID --mac MAC [--mac MAC]... [flags]",
		Short: "Add or replace a node's boot entries, one per MAC",
		Long: `Add boot entries for one node (boot.prepareRamdisk). Each --mac adds one
entry with the same settings; an entry for a MAC the node already has is
replaced. A MAC belongs to one node only. Without --ttl or --not-after the
appliance's entries.default_ttl applies.`,
		Example: `  siteboot entry add --node-id node-17 --mac 52:54:00:12:34:56 --arch x86_64-efi --ttl 2h
  siteboot entry add --node-id node-17 --mac 5254.0012.3456 --mac 52-54-00-12-34-57 --workflow-id wf-9`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request(time.Now())
			if err != nil {
				return err
			}
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.PrepareRamdiskResponse, error) {
				return api.PrepareRamdisk(ctx, req)
			}, func(w io.Writer, resp *sitebootv1.PrepareRamdiskResponse) error {
				return printEntries(w, resp.GetEntries())
			})
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.nodeID, "node-id", "", "node the entries belong to (required)")
	fl.StringArrayVar(&f.macs, "mac", nil, "PXE MAC, any common notation; repeat for several NICs (required)")
	fl.StringVar(&f.uuid, "uuid", "", "SMBIOS product UUID")
	fl.StringVar(&f.arch, "arch", "", "boot arch: bios, x86_64-efi, arm64-efi, x86_64-efi-http (default: what the firmware says)")
	fl.StringVar(&f.bootFile, "boot-file", "", "first-stage boot file, overriding the per-arch default")
	fl.StringVar(&f.scriptURL, "script-url", "", "this machine's own iPXE script URL (http or https)")
	fl.StringVar(&f.workflowID, "workflow-id", "", "workflow the entries belong to")
	fl.DurationVar(&f.ttl, "ttl", 0, "lifetime of the entries, like 2h (exclusive with --not-after)")
	fl.StringVar(&f.notAfter, "not-after", "", "expiry time, RFC 3339 (exclusive with --ttl)")
	fl.StringVar(&f.tokenRef, "discovery-token-ref", "", "secret ref of the discovery token: env://NAME or file:///path")
	fl.StringVar(&f.sanboot, "sanboot-sha256", "", "boot this cached ISO (hex SHA-256) instead of the ramdisk")
	_ = c.MarkFlagRequired("node-id")
	_ = c.MarkFlagRequired("mac")
	c.MarkFlagsMutuallyExclusive("ttl", "not-after")
	return c
}

func (f *entryAddFlags) request(now time.Time) (*sitebootv1.PrepareRamdiskRequest, error) {
	arch, err := bootentry.ParseArch(f.arch)
	if err != nil {
		return nil, fmt.Errorf("--arch: %w", err)
	}
	var notAfter *timestamppb.Timestamp
	switch {
	case f.ttl < 0:
		return nil, errors.New("--ttl: must be positive")
	case f.ttl > 0:
		notAfter = timestamppb.New(now.Add(f.ttl))
	case f.notAfter != "":
		t, err := time.Parse(time.RFC3339, f.notAfter)
		if err != nil {
			return nil, fmt.Errorf("--not-after: %q is not an RFC 3339 time (like 2026-12-01T15:04:05Z)", f.notAfter)
		}
		notAfter = timestamppb.New(t)
	}
	var digest []byte
	if f.sanboot != "" {
		if digest, err = hex.DecodeString(f.sanboot); err != nil || len(digest) != 32 {
			return nil, fmt.Errorf("--sanboot-sha256: %q is not 64 hex digits", f.sanboot)
		}
	}
	req := &sitebootv1.PrepareRamdiskRequest{NodeId: f.nodeID}
	for _, mac := range f.macs {
		req.Entries = append(req.Entries, &sitev1.ProxyDhcpEntry{
			Mac: mac, ProductUuid: f.uuid, Arch: arch, BootFile: f.bootFile,
			IpxeScriptUrl: f.scriptURL, WorkflowId: f.workflowID, NotAfter: notAfter,
			DiscoveryTokenRef: f.tokenRef, SanbootSha256: digest,
		})
	}
	return req, nil
}

func newEntryLsCmd(cl *clientOptions) *cobra.Command {
	var nodeID string
	c := &cobra.Command{
		Use:   "ls [--node-id ID]",
		Short: "List boot entries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.ListEntriesResponse, error) {
				return api.ListEntries(ctx, &sitebootv1.ListEntriesRequest{NodeId: nodeID})
			}, func(w io.Writer, resp *sitebootv1.ListEntriesResponse) error {
				return printEntries(w, resp.GetEntries())
			})
		},
	}
	c.Flags().StringVar(&nodeID, "node-id", "", "list only this node's entries")
	return c
}

func printEntries(w io.Writer, entries []*sitebootv1.Entry) error {
	t := newTable(w, "NODE", "MAC", "ARCH", "WORKFLOW", "BOOT", "NOT AFTER", "LIVE")
	for _, e := range entries {
		pe := e.GetEntry()
		t.row(e.GetNodeId(), pe.GetMac(), bootentry.ArchName(pe.GetArch()), pe.GetWorkflowId(), bootKind(pe),
			pe.GetNotAfter().AsTime().Local().Format(time.RFC3339), e.GetLive())
	}
	return t.flush()
}

func bootKind(e *sitev1.ProxyDhcpEntry) string {
	switch {
	case len(e.GetSanbootSha256()) > 0:
		return "sanboot:" + hex.EncodeToString(e.GetSanbootSha256())[:12]
	case e.GetIpxeScriptUrl() != "":
		return "script:" + e.GetIpxeScriptUrl()
	}
	return "ramdisk"
}

func newEntryRmCmd(cl *clientOptions) *cobra.Command {
	req := &sitev1.BootCleanUpRequest{}
	c := &cobra.Command{
		Use:   "rm --node-id ID [--mac MAC]... [--workflow-id W]",
		Short: "Remove a node's boot entries (all, or those of the MACs / workflow given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.CleanUpResponse, error) {
				return api.CleanUp(ctx, req)
			}, func(w io.Writer, resp *sitebootv1.CleanUpResponse) error {
				if len(resp.GetRemovedMacs()) == 0 {
					_, err := fmt.Fprintln(w, "no entries matched")
					return err
				}
				_, err := fmt.Fprintf(w, "removed %d: %s\n", len(resp.GetRemovedMacs()), strings.Join(resp.GetRemovedMacs(), " "))
				return err
			})
		},
	}
	c.Flags().StringVar(&req.NodeId, "node-id", "", "node whose entries to remove (required)")
	c.Flags().StringArrayVar(&req.Macs, "mac", nil, "remove only this MAC's entry; repeatable")
	c.Flags().StringVar(&req.WorkflowId, "workflow-id", "", "remove only entries of this workflow")
	_ = c.MarkFlagRequired("node-id")
	return c
}
