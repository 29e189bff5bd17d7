package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

func newSiteCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "site",
		Short: "Apply or show the site spec (cache images, proxy targets)",
	}
	c.AddCommand(newSiteApplyCmd(cl), newSiteShowCmd(cl))
	return c
}

func newSiteApplyCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "apply FILE",
		Short: "Replace the site spec with FILE (a SiteSpec as protojson, or the same shape in YAML)",
		Long: `Apply a bettercompute.site.v1.SiteSpec, as a whole: images the new spec no
longer lists are released to eviction. FILE is protojson or YAML of the same
shape; digests may be written as 64 hex digits as well as base64. Unknown
fields are errors. '-' reads standard input.`,
		Example: `  cat > site.yaml <<EOF
  cacheImages:
    - url: https://images.example/debian-12.iso
      sha256: 5f0a8a47b0d6cbd4e4b8d4b5ba9bd4b4e4b8d4b5ba9bd4b4e4b8d4b5ba9bd4b4
      format: iso
  proxyTargets:
    - nodeId: talos-1
      addresses: [10.0.0.51]
  EOF
  siteboot site apply site.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := readSiteSpec(args[0])
			if err != nil {
				return err
			}
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.ApplySiteSpecResponse, error) {
				return api.ApplySiteSpec(ctx, &sitebootv1.ApplySiteSpecRequest{Spec: spec})
			}, func(w io.Writer, resp *sitebootv1.ApplySiteSpecResponse) error {
				out := w
				fmt.Fprintf(out, "applied: %d cache images, %d proxy targets\n", len(resp.GetSpec().GetCacheImages()), len(resp.GetSpec().GetProxyTargets()))
				for _, d := range resp.GetReleased() {
					fmt.Fprintf(out, "released %x\n", d)
				}
				return nil
			})
		},
	}
}

func newSiteShowCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the site spec last applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, ctx, done, err := cl.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := api.GetSiteSpec(ctx, &sitebootv1.GetSiteSpecRequest{})
			if err != nil {
				return err
			}
			if cl.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp.GetSpec())
			}
			t := newTable(cmd.OutOrStdout(), "KIND", "ID", "DETAIL")
			for _, ci := range resp.GetSpec().GetCacheImages() {
				t.row("image", hex.EncodeToString(ci.GetSha256()), ci.GetFormat()+" "+ci.GetUrl())
			}
			for _, pt := range resp.GetSpec().GetProxyTargets() {
				t.row("proxy target", pt.GetNodeId(), strings.Join(pt.GetAddresses(), ","))
			}
			return t.flush()
		},
	}
}

// readSiteSpec reads protojson or YAML into a SiteSpec, strictly.
func readSiteSpec(path string) (*sitev1.SiteSpec, error) {
	var data []byte
	var err error
	f := os.Stdin
	if path != "-" {
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		defer f.Close()
	}
	data, err = readAllLimited(f)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	hexDigestsToBase64(doc)
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	spec := &sitev1.SiteSpec{}
	if err := protojson.Unmarshal(js, spec); err != nil {
		return nil, fmt.Errorf("%s: not a SiteSpec: %w", path, err)
	}
	return spec, nil
}

// maxSpecBytes bounds a spec file.
const maxSpecBytes = 16 << 20

func readAllLimited(f *os.File) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxSpecBytes+1))
	if err == nil && len(b) > maxSpecBytes {
		err = fmt.Errorf("site spec larger than %d bytes", maxSpecBytes)
	}
	return b, err
}

// hexDigestsToBase64 rewrites every "sha256" value written as 64 hex digits
// into the base64 protojson expects; 64 hex digits read as base64 would be
// 48 bytes, never a valid digest, so nothing valid changes meaning.
func hexDigestsToBase64(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if s, ok := val.(string); ok && k == "sha256" && len(s) == 64 {
				if d, err := hex.DecodeString(s); err == nil {
					t[k] = base64.StdEncoding.EncodeToString(d)
					continue
				}
			}
			hexDigestsToBase64(val)
		}
	case []any:
		for _, e := range t {
			hexDigestsToBase64(e)
		}
	}
}
