package main

import (
	"context"

	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/siteboot/siteboot/admin"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/httpproxy"
	"github.com/siteboot/siteboot/secretref"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

// maxProxyBody bounds --body: the request travels in one admin API
// message, whose cap the appliance enforces.
const maxProxyBody = admin.MaxMessageBytes - 64<<10

type proxyFlags struct {
	targetNode, url, method, spki, body string
	headers, secretHeaders              []string
	timeout                             time.Duration
}

func newProxyCmd(cl *clientOptions) *cobra.Command {
	var f proxyFlags
	c := &cobra.Command{
		Use:     "proxy --target-node ID --url URL [--method M] [--header K:V]... [--secret-header K:REF]... [--body STRING|@FILE|@-]",
		Short:   "Make one HTTP request to a proxy target of the site spec (site.httpProxy)",
		Long:    proxyLong,
		Example: proxyExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request(cmd.InOrStdin())
			if err != nil {
				return err
			}
			if err := checkOutput(cl); err != nil {
				return err
			}
			deadline := httpproxy.MaxTimeout + relayMargin
			if f.timeout > 0 {
				deadline = f.timeout + relayMargin
			}
			resp, err := relayCall(cmd, cl, deadline, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitev1.HttpProxyResponse, error) {
				return api.HttpProxy(ctx, req)
			})
			if code := relayReason(err); code != "" {
				return &relayFailure{line: "proxy: " + status.Convert(err).Message()}
			} else if err != nil {
				return err
			}
			return showProxyResponse(cmd.OutOrStdout(), cmd.ErrOrStderr(), cl.output, resp)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.targetNode, "target-node", "", "the node (proxyTargets[].nodeId) whose address the URL names")
	fl.StringVar(&f.url, "url", "", "the http(s) URL; its host must be one of the node's addresses")
	fl.StringVar(&f.method, "method", "GET", "GET, POST, PUT, DELETE, HEAD or PATCH")
	fl.StringArrayVar(&f.headers, "header", nil, "a request header NAME:VALUE (repeatable)")
	fl.StringArrayVar(&f.secretHeaders, "secret-header", nil, "a request header NAME:REF whose value the appliance reads from secret ref REF (repeatable)")
	fl.StringVar(&f.spki, "spki-sha256", "", "pin the target certificate's SubjectPublicKeyInfo SHA-256 (64 hex digits) instead of verifying its chain")
	fl.DurationVar(&f.timeout, "timeout", 0, "the request's timeout (0: the appliance's httpproxy.timeout; at most 5m)")
	fl.StringVar(&f.body, "body", "", "the request body: STRING, @FILE, or @- for standard input")
	for _, name := range []string{"target-node", "url"} {
		_ = c.MarkFlagRequired(name)
	}
	return c
}

// request builds the HttpProxyRequest; the appliance checks the rest.
func (f *proxyFlags) request(stdin io.Reader) (*sitev1.HttpProxyRequest, error) {
	headers, err := parseHeaders("--header", "VALUE", f.headers)
	if err != nil {
		return nil, err
	}
	secret, err := parseHeaders("--secret-header", "REF", f.secretHeaders)
	if err != nil {
		return nil, err
	}
	pin, err := parseSPKI(f.spki)
	if err != nil {
		return nil, err
	}
	if f.timeout < 0 || (f.timeout > 0 && f.timeout < time.Millisecond) || f.timeout.Milliseconds() > math.MaxUint32 {
		return nil, fmt.Errorf("--timeout %s: want 1ms or more (at most the appliance's 5m), or 0 for httpproxy.timeout", f.timeout)
	}
	body, err := readBody(f.body, stdin)
	if err != nil {
		return nil, err
	}
	return &sitev1.HttpProxyRequest{
		TargetNodeId: f.targetNode, Url: f.url, Method: strings.ToUpper(f.method), Headers: headers, Body: body,
		TlsSpkiSha256: pin, TimeoutMs: uint32(f.timeout.Milliseconds()), SecretHeaders: secret,
	}, nil
}

// parseHeaders reads NAME:VALUE flags; blanks after the colon are dropped
// (curl's "Name: value" works too). An error never repeats the flag's text:
// it may be a token (a header value, or a secret given in place of its ref).
func parseHeaders(flag, what string, list []string) ([]*sitev1.HttpProxyHeader, error) {
	var out []*sitev1.HttpProxyHeader
	for i, h := range list {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%s number %d: want NAME:%s (its text is not repeated: it may hold a secret)", flag, i+1, what)
		}
		value = strings.TrimLeft(value, " \t")
		if what == "REF" {
			if err := checkRef(flag+" "+name, value); err != nil {
				return nil, err
			}
		}
		out = append(out, &sitev1.HttpProxyHeader{Name: name, Value: value})
	}
	return out, nil
}

// checkRef refuses what is not a secret ref before it leaves this process,
// without repeating it: it may be the secret itself, pasted where its ref
// belongs. The appliance checks the ref against its secrets.* policy.
func checkRef(what, ref string) error {
	if _, err := secretref.Parse(ref); err != nil {
		return fmt.Errorf("%s: want a secret ref, env://NAME or file:///PATH (not the secret itself; what was given is not repeated)", what)
	}
	return nil
}

// readBody reads --body: the string itself, @FILE, or @- (stdin), at
// most maxProxyBody bytes.
func readBody(arg string, stdin io.Reader) ([]byte, error) {
	name, ok := strings.CutPrefix(arg, "@")
	if !ok {
		if len(arg) > maxProxyBody {
			return nil, fmt.Errorf("--body: %d bytes; at most %d", len(arg), maxProxyBody)
		}
		return []byte(arg), nil
	}
	r := stdin
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--body: %w", err)
		}
		defer file.Close()
		r = file
	}
	b, err := io.ReadAll(io.LimitReader(r, maxProxyBody+1))
	if err != nil {
		return nil, fmt.Errorf("--body %s: %w", arg, err)
	}
	if len(b) > maxProxyBody {
		return nil, fmt.Errorf("--body %s: larger than %d bytes (one admin API message is at most 4 MiB)", arg, maxProxyBody)
	}
	return b, nil
}

// showProxyResponse prints a response as protojson or as text, and
// "(truncated)" on stderr after it when the body was cut.
func showProxyResponse(stdout, stderr io.Writer, output string, resp *sitev1.HttpProxyResponse) error {
	var err error
	if output == "json" {
		err = printJSON(stdout, resp)
	} else {
		err = printProxyResponse(stdout, resp)
	}
	if err == nil && resp.GetTruncated() {
		_, err = fmt.Fprintln(stderr, "(truncated)")
	}
	return err
}

// printProxyResponse prints the status line, the headers (a value with a
// control character quoted), a blank line and the body as it came.
func printProxyResponse(w io.Writer, resp *sitev1.HttpProxyResponse) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\n", resp.GetStatus())
	for _, h := range resp.GetHeaders() {
		v := h.GetValue()
		if strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "%s: %s\n", h.GetName(), v)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	_, err := w.Write(resp.GetBody())
	return err
}

// proxyLong and proxyExample are `siteboot proxy --help`.
const proxyLong = `Make one HTTP request from the appliance to a node's API (the HttpProxy RPC),
for machines whose API is reachable only inside the site.

The URL's host must be one of the addresses the site spec lists for
--target-node under proxyTargets ('siteboot site apply'): an IP literal
compared as an IP, or a name compared as a name and then resolved once,
every address it gives being an IP the node lists too (list a node's names
and their addresses). Whatever the spec says, a
target is never a loopback, link-local, multicast or unspecified address, an
address in bmc.networks, or one of the appliance's own addresses. Plain http
is allowed only to addresses in httpproxy.provisioning_networks; elsewhere
https only, verified against the system roots (an IP literal must be an IP
SAN of the certificate) or, with --spki-sha256, against that pin alone. Anything else is refused with forbidden-target
before a packet is sent.

Redirects are not followed (a 3xx is printed as it is); every request uses
a fresh connection and no proxy environment variable. The body is cut at
httpproxy.max_response_bytes (1MiB by default) and "(truncated)" is printed
on stderr. --timeout bounds the request (default httpproxy.timeout, 30s;
at most 5m); here it is the request's timeout, not the wait for the
appliance.

--header NAME:VALUE sends a header (repeatable); Host, Connection, Upgrade,
Transfer-Encoding, Content-Length, TE, Trailer, Keep-Alive, Expect,
HTTP2-Settings and Proxy-* are the proxy's and refused.
--secret-header NAME:REF sends a header whose value the appliance reads from
the secret ref REF (file:///PATH under secrets.dir, env://NAME starting with
secrets.env_prefix): the value never appears on the command line, in a log
or in the response. --body sends STRING, the contents of @FILE, or of
standard input with @- (at most 4 MiB in all).

Prints "HTTP STATUS", the response headers, a blank line and the body; -o json
prints the HttpProxyResponse (the body base64). Any status the target
answers exits 0. A refused or failed request prints "proxy: CODE: MESSAGE"
on stderr and exits 1; CODE is one of forbidden-target, invalid-args,
credentials-unavailable, unreachable, timeout, pin-mismatch, tls-failed,
busy, internal.`

const proxyExample = `  # the allow-list, in the site spec
  cat > site.yaml <<EOF
  proxyTargets:
    - nodeId: talos-1
      addresses: [10.0.0.51, talos-1.site.example]   # the name and its address
  EOF
  siteboot site apply site.yaml

  siteboot proxy --target-node talos-1 --url https://10.0.0.51:50000/version \
      --spki-sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  siteboot proxy --target-node talos-1 --url https://talos-1.site.example:6443/readyz \
      --secret-header Authorization:file:///etc/siteboot/secrets/talos-1-bearer
  siteboot proxy --target-node talos-1 --url https://10.0.0.51/api/v1/config --method PUT \
      --header Content-Type:application/json --body @config.json --timeout 2m
  echo '{"reboot": true}' | siteboot proxy --target-node talos-1 --url https://10.0.0.51/api --method POST --body @-`
