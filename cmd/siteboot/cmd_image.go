package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
)

func newImageCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Manage the verified image cache",
		Long: `The image cache holds images by SHA-256 and serves them at /cache/<hex>
(HTTP ranges, for iPXE sanboot and ramdisks) only once their digest is
verified. It holds the site spec's cache_images ('siteboot site apply') and
the images added here.`,
	}
	c.AddCommand(newImageAddCmd(cl), newImageLsCmd(cl), newImageRmCmd(cl), newImagePullCmd(cl))
	return c
}

func parseDigestFlag(name, s string) ([]byte, error) {
	d, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s), "sha256:"))
	if err != nil || len(d) != 32 {
		return nil, fmt.Errorf("%s: %q is not 64 hex digits", name, s)
	}
	return d, nil
}

func newImageAddCmd(cl *clientOptions) *cobra.Command {
	var url, digest, format, compression, source string
	c := &cobra.Command{
		Use:   "add --url URL --sha256 HEX [--format iso|raw|qcow2]",
		Short: "Add an image for the cache to pull and hold",
		Example: `  siteboot image add --url https://images.example/debian-12.iso --sha256 5f0a… --format iso
  siteboot image add --url https://images.example/tools.iso.zst --compression zstd --sha256 <raw digest> --source-sha256 <zst digest>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDigestFlag("--sha256", digest)
			if err != nil {
				return err
			}
			req := &sitebootv1.AddImageRequest{Image: &sitev1.CacheImage{Url: url, Sha256: d, Format: format}, Compression: compression}
			if source != "" {
				if req.SourceSha256, err = parseDigestFlag("--source-sha256", source); err != nil {
					return err
				}
			}
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.AddImageResponse, error) {
				return api.AddImage(ctx, req)
			}, func(w io.Writer, resp *sitebootv1.AddImageResponse) error {
				return printImages(w, []*sitebootv1.Image{resp.GetImage()})
			})
		},
	}
	f := c.Flags()
	f.StringVar(&url, "url", "", "http(s) URL of the image (required)")
	f.StringVar(&digest, "sha256", "", "SHA-256 of the image bytes as served (required)")
	f.StringVar(&format, "format", "", "iso, raw, qcow2, …")
	f.StringVar(&compression, "compression", "", "zstd or gzip: decompress on pull, serve raw")
	f.StringVar(&source, "source-sha256", "", "SHA-256 of the compressed bytes, checked too")
	_ = c.MarkFlagRequired("url")
	_ = c.MarkFlagRequired("sha256")
	return c
}

func newImageLsCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the cache: state, size, last use, why a pull failed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, cl, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitebootv1.ListImagesResponse, error) {
				return api.ListImages(ctx, &sitebootv1.ListImagesRequest{})
			}, func(w io.Writer, resp *sitebootv1.ListImagesResponse) error {
				if err := printImages(w, resp.GetImages()); err != nil {
					return err
				}
				capacity := "unbounded"
				if resp.GetCapacityBytes() > 0 {
					capacity = humanBytes(resp.GetCapacityBytes())
				}
				_, err := fmt.Fprintf(w, "used %s of %s\n", humanBytes(resp.GetUsedBytes()), capacity)
				return err
			})
		},
	}
}

func printImages(w io.Writer, images []*sitebootv1.Image) error {
	t := newTable(w, "SHA256", "STATE", "SIZE", "FORMAT", "WANTED BY", "LAST USED", "URL", "REASON")
	for _, im := range images {
		size := humanBytes(im.GetSizeBytes())
		if im.GetState() == "pulling" || im.GetState() == "queued" {
			size = humanBytes(im.GetDoneBytes()) + "/" + size
		}
		last := ""
		if im.GetLastUsed() != nil {
			last = im.GetLastUsed().AsTime().Local().Format(time.RFC3339)
		}
		t.row(hex.EncodeToString(im.GetSha256())[:16], im.GetState(), size, im.GetFormat(), wantedBy(im), last, im.GetUrl(), im.GetReason())
	}
	return t.flush()
}

func wantedBy(im *sitebootv1.Image) string {
	var by []string
	if im.GetInSpec() {
		by = append(by, "spec")
	}
	if im.GetAdded() {
		by = append(by, "added")
	}
	if im.GetPinned() {
		by = append(by, "pinned")
	}
	if len(by) == 0 {
		return "released"
	}
	return strings.Join(by, ",")
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newImageRmCmd(cl *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "rm HEX",
		Short: "Remove an added or released image now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseDigestFlag("image", args[0])
			if err != nil {
				return err
			}
			api, ctx, done, err := cl.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := api.RemoveImage(ctx, &sitebootv1.RemoveImageRequest{Sha256: d}); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %x\n", d)
			return err
		},
	}
}

func newImagePullCmd(cl *clientOptions) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use:   "pull [HEX...] [--wait]",
		Short: "Retry failed pulls now; with --wait, show progress until all are READY",
		Long: `Pull retries the given images (every wanted image when none is given)
that failed, and with --wait follows them until each is READY: progress
bars on a terminal, one line per change otherwise. It fails naming the image
and the reason as soon as one fails. --timeout bounds the wait.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &sitebootv1.PullImagesRequest{Wait: wait}
			for _, a := range args {
				d, err := parseDigestFlag("image", a)
				if err != nil {
					return err
				}
				req.Sha256 = append(req.Sha256, d)
			}
			api, ctx, done, err := cl.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			stream, err := api.PullImages(ctx, req)
			if err != nil {
				return err
			}
			p := newProgress(cmd.OutOrStdout(), cl.output == "json")
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := p.update(resp); err != nil {
					return err
				}
			}
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "follow the pulls until every image is READY")
	return c
}
