package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
	"google.golang.org/protobuf/encoding/protojson"
)

// cliCall is one run of a siteboot client command, kept whole so that a
// test can search everything the command printed.
type cliCall struct {
	Args           []string
	Stdout, Stderr string
	// Exit is the exit status (-1: it did not run or was killed).
	Exit int
}

// run runs a client command against the appliance's socket and returns
// what it printed and its exit status; it never fails the test.
func (a *appliance) run(ctx context.Context, args ...string) cliCall {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, append([]string{"--socket", a.socket}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c := cliCall{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		c.Exit = exit.ExitCode()
	default:
		c.Exit = -1
		c.Stderr += "\n(run: " + err.Error() + ")"
	}
	return c
}

// String is the command line and what it printed, for failure reports.
func (c cliCall) String() string {
	return "siteboot " + strings.Join(c.Args, " ") + "\n  stdout: " + strings.TrimSpace(c.Stdout) + "\n  stderr: " + strings.TrimSpace(c.Stderr)
}

// failureCode is the relay code of a failed call: the code that starts
// the message of its error line on stderr ("<cmd>: <code>: …", or the
// client's own "siteboot: <code>: …"), or "".
func (c cliCall) failureCode(cmd string) string {
	for _, line := range strings.Split(c.Stderr, "\n") {
		for {
			if code, _, ok := strings.Cut(line, ": "); ok && slices.Contains(relayCodes, code) {
				return code
			}
			rest, ok := strings.CutPrefix(line, "siteboot: ")
			if !ok {
				rest, ok = strings.CutPrefix(line, cmd+": ")
			}
			if !ok {
				break
			}
			line = rest
		}
	}
	return ""
}

// relayCodes are the codes a relay failure may carry.
var relayCodes = []string{
	relayerr.ForbiddenTarget, relayerr.InvalidArgs, relayerr.Unsupported, relayerr.CredentialsUnavailable,
	relayerr.Unreachable, relayerr.AuthFailed, relayerr.PinMismatch, relayerr.TLSFailed, relayerr.Timeout,
	relayerr.Busy, relayerr.BMCError, relayerr.Internal,
}

// bmcCall is one `siteboot bmc … -o json`.
type bmcCall struct {
	cliCall
	// Result is the decoded BmcOperationResult when stdout held one.
	Result *sitev1.BmcOperationResult
}

// bmc runs `siteboot bmc ARGS -o json`.
func (a *appliance) bmc(ctx context.Context, args ...string) bmcCall {
	c := bmcCall{cliCall: a.run(ctx, append(append([]string{"bmc"}, args...), "-o", "json")...)}
	if out := strings.TrimSpace(c.Stdout); out != "" {
		var r sitev1.BmcOperationResult
		if protojson.Unmarshal([]byte(out), &r) == nil {
			c.Result = &r
		}
	}
	return c
}

// code is "ok" for a successful operation, else its error code (from the
// result, or from stderr when the command printed no result).
func (c bmcCall) code() string {
	if c.Exit == 0 && c.Result.GetOk() {
		return "ok"
	}
	if code := c.Result.GetErrorCode(); code != "" {
		return code
	}
	if code := c.failureCode("bmc"); code != "" {
		return code
	}
	return "(none)"
}

// mustResult fails the test unless the operation succeeded with result
// JSON want (canonical: compact, keys sorted).
func (c bmcCall) mustResult(t *testing.T, want string) {
	t.Helper()
	if c.code() != "ok" || c.Result.GetResultJson() != want {
		t.Fatalf("want ok with %s, got code %s result %q\n%s", want, c.code(), c.Result.GetResultJson(), c)
	}
}

// proxyCall is one `siteboot proxy … -o json`.
type proxyCall struct {
	cliCall
	// Response is the decoded HttpProxyResponse of a successful call.
	Response *sitev1.HttpProxyResponse
}

// proxy runs `siteboot proxy ARGS -o json`.
func (a *appliance) proxy(ctx context.Context, args ...string) proxyCall {
	c := proxyCall{cliCall: a.run(ctx, append(append([]string{"proxy"}, args...), "-o", "json")...)}
	if out := strings.TrimSpace(c.Stdout); c.Exit == 0 && out != "" {
		var r sitev1.HttpProxyResponse
		if protojson.Unmarshal([]byte(out), &r) == nil {
			c.Response = &r
		}
	}
	return c
}

// code is "ok" when a response came back, else the failure's code.
func (c proxyCall) code() string {
	if c.Exit == 0 && c.Response != nil {
		return "ok"
	}
	if code := c.failureCode("proxy"); code != "" {
		return code
	}
	return "(none)"
}
