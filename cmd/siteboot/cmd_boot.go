package main

import (
	"context"
	"fmt"
	"io"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
)

func newDiscoveredCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "discovered",
		Short: "Machines that network-booted without a live entry (never answered)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List discovered machines, most recently seen first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.ListDiscoveredResponse, error) {
				return api.ListDiscovered(ctx, &sitebootv1.ListDiscoveredRequest{})
			}, func(w io.Writer, resp *sitebootv1.ListDiscoveredResponse) error {
				t := newTable(w, "MAC", "ARCH", "PRODUCT UUID", "RELAY", "COUNT", "FIRST SEEN", "LAST SEEN")
				for _, m := range resp.GetMachines() {
					t.row(m.GetMac(), m.GetArch(), m.GetProductUuid(), m.GetRelay(), m.GetCount(),
						m.GetFirstSeen().AsTime().Local().Format(time.RFC3339), m.GetLastSeen().AsTime().Local().Format(time.RFC3339))
				}
				return t.flush()
			})
		},
	})
	return c
}

func newScriptCmd(cl *clientOptions) *cobra.Command {
	req := &sitev1.IpxeScriptRequest{}
	var reveal bool
	c := &cobra.Command{
		Use:   "script --mac MAC [--buildarch A] [--platform P]",
		Short: "Show the iPXE script a machine would get now",
		Long: `Show the iPXE script /ipxe would serve this machine now. For a ramdisk
entry the discovery token (resolved, so a ref that fails shows here) and
the signed assertion appear as REDACTED, and nothing is signed, unless
--reveal-secrets is given: then the script is exactly what the machine
would get, token and a freshly signed assertion included. Only root may
reveal. An unknown machine is shown the script it would get, but is not
recorded as discovered. For an entry that pins a product UUID, give
--uuid: a request without it is treated as an unknown machine.`,
		Example: `  siteboot script --mac 52:54:00:12:34:56 --buildarch x86_64 --platform efi`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, ctx, done, err := cl.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := api.PreviewScript(ctx, &sitebootv1.PreviewScriptRequest{Request: req, RevealSecrets: reveal})
			if err != nil {
				return err
			}
			if cl.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), resp.GetScript())
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&req.Mac, "mac", "", "the machine's MAC (required)")
	f.StringVar(&req.Uuid, "uuid", "", "its SMBIOS UUID, as iPXE's ${uuid}")
	f.StringVar(&req.Buildarch, "buildarch", "", "iPXE's ${buildarch}: x86_64, i386, arm64")
	f.StringVar(&req.Platform, "platform", "", "iPXE's ${platform}: efi, pcbios")
	f.StringVar(&req.Ip, "ip", "", "the machine's IP (what the assertion vouches for)")
	f.BoolVar(&reveal, "reveal-secrets", false, "show the discovery token and a signed assertion instead of REDACTED (root only)")
	_ = c.MarkFlagRequired("mac")
	return c
}
