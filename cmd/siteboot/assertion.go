package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/discovery"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxAssertionFile bounds what `assertion verify` reads from FILE: the
// longest assertion text and room for whitespace around it.
const maxAssertionFile = discovery.MaxAssertionText + 4096

func newAssertionCmd(cl *clientOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "assertion",
		Short: "Check the signed discovery assertions ramdisk scripts carry (bc.assertion=)",
	}
	c.AddCommand(newAssertionVerifyCmd(cl))
	return c
}

func newAssertionVerifyCmd(cl *clientOptions) *cobra.Command {
	var keys string
	var minEpoch uint64
	c := &cobra.Command{
		Use:   "verify FILE [--keys URL|FILE] [--min-epoch N]",
		Short: "Verify an assertion: signature, key id, expiry and boot lease epoch",
		Long: `Verify a signed discovery assertion and print what it says. FILE (or - for
stdin) holds the text exactly as it appears after bc.assertion= in a ramdisk
script; whitespace around it is ignored.

The assertion is valid when its key id names one of the site's keys, that
key's ES256 signature over it verifies, now is before its not_after,
its issued_at is not in the future (beyond a minute of clock skew), and its
boot_lease_epoch is at least --min-epoch.

With --keys the check runs here, against the JWKS at that http(s) URL (an
appliance serves its site's keys at /v1/keys) or in that file; no admin
API is needed. Without --keys the appliance checks it (the VerifyAssertion
RPC) against the keys of its site's members.

Exits 0 only when the assertion is valid; otherwise it prints what could
be decoded and exits non-zero with the reason.`,
		Example: `  siteboot assertion verify --keys http://10.0.0.2:8080/v1/keys assertion.txt
  grep -o 'bc.assertion=[^ ]*' script.ipxe | cut -d= -f2 | siteboot assertion verify --min-epoch 3 -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cl.output != "table" && cl.output != "json" {
				return fmt.Errorf("--output %q: want table or json", cl.output)
			}
			text, err := readAssertion(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			var resp *sitebootv1.VerifyAssertionResponse
			if keys != "" {
				resp, err = verifyLocally(cmd.Context(), text, keys, minEpoch, cl.timeout)
			} else {
				resp, err = verifyRemotely(cmd.Context(), cl, text, minEpoch)
			}
			if err != nil {
				return err
			}
			if err := printAssertion(cmd.OutOrStdout(), cl.output, resp); err != nil {
				return err
			}
			if !resp.GetValid() {
				return fmt.Errorf("the assertion is not valid: %s", resp.GetReason())
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&keys, "keys", "", "verify here against this JWKS: an http(s) URL (e.g. http://APPLIANCE/v1/keys) or a file")
	f.Uint64Var(&minEpoch, "min-epoch", 0, "refuse an assertion whose boot_lease_epoch is lower")
	return c
}

// readAssertion reads FILE ("-" is stdin), bounded, without surrounding
// whitespace.
func readAssertion(name string, stdin io.Reader) (string, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxAssertionFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxAssertionFile {
		return "", fmt.Errorf("%s: larger than %d bytes; an assertion is at most %d", name, maxAssertionFile, discovery.MaxAssertionText)
	}
	return strings.TrimSpace(string(data)), nil
}

func verifyLocally(ctx context.Context, text, keysFrom string, minEpoch uint64, timeout time.Duration) (*sitebootv1.VerifyAssertionResponse, error) {
	data, err := readKeys(ctx, keysFrom, timeout)
	if err != nil {
		return nil, fmt.Errorf("--keys %s: %w", keysFrom, err)
	}
	set, err := discovery.ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("--keys %s: %w", keysFrom, err)
	}
	c := appliance.CheckAssertion(text, discovery.VerifyPolicy{Keys: set, Now: time.Now(), MinEpoch: minEpoch})
	resp := &sitebootv1.VerifyAssertionResponse{Valid: c.Valid, KeyId: c.KeyID, Assertion: c.Assertion}
	if !c.Valid {
		resp.Reason = c.Reason + ": " + c.Detail
	}
	return resp, nil
}

// readKeys fetches a JWKS from an http(s) URL (within timeout, no
// redirects) or reads it from a file, at most discovery.MaxJWKSBytes.
func readKeys(ctx context.Context, from string, timeout time.Duration) ([]byte, error) {
	if !strings.HasPrefix(from, "http://") && !strings.HasPrefix(from, "https://") {
		f, err := os.Open(from)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readBounded(f)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, from, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s (redirects are not followed)", resp.Status)
	}
	return readBounded(resp.Body)
}

func readBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, discovery.MaxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > discovery.MaxJWKSBytes {
		return nil, fmt.Errorf("larger than %d bytes", discovery.MaxJWKSBytes)
	}
	return data, nil
}

func verifyRemotely(ctx context.Context, cl *clientOptions, text string, minEpoch uint64) (*sitebootv1.VerifyAssertionResponse, error) {
	api, ctx, done, err := cl.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return api.VerifyAssertion(ctx, &sitebootv1.VerifyAssertionRequest{Assertion: text, MinEpoch: minEpoch})
}

func printAssertion(w io.Writer, output string, resp *sitebootv1.VerifyAssertionResponse) error {
	if output == "json" {
		return printJSON(w, resp)
	}
	t := newTable(w, "FIELD", "VALUE")
	if resp.GetValid() {
		t.row("valid", "yes")
	} else {
		t.row("valid", "NO: "+resp.GetReason())
	}
	t.row("key id", resp.GetKeyId())
	if a := resp.GetAssertion(); a != nil {
		t.row("site", a.GetSiteId())
		t.row("signed by", a.GetSiteAgentNodeId())
		t.row("boot lease epoch", a.GetBootLeaseEpoch())
		t.row("mac", a.GetMac())
		t.row("ip", a.GetIp())
		t.row("product uuid", a.GetProductUuid())
		t.row("workflow", a.GetWorkflowId())
		t.row("issued at", timeCol(a.GetIssuedAt()))
		t.row("not after", timeCol(a.GetNotAfter()))
	}
	return t.flush()
}

func timeCol(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().Local().Format(time.RFC3339)
}
