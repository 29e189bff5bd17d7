package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// relayFailure is a relay operation that failed with a relay code: its
// line ("bmc: CODE: MESSAGE", "proxy: CODE: MESSAGE") is printed on stderr
// as it is, without the "siteboot: " every other error gets, so scripts
// can match the code at the start.
type relayFailure struct{ line string }

func (f *relayFailure) Error() string { return f.line }

// relayMargin is how much longer than the appliance's own deadline the CLI
// waits for a relay answer, so that the appliance's timeout (a result
// with its code) arrives before the CLI gives up.
const relayMargin = 15 * time.Second

// relayCall dials the appliance (waiting at most --timeout for it to be
// ready) and makes one relay call with its own deadline: a BMC operation
// or a proxied request may take longer than the wait for the appliance.
func relayCall[T proto.Message](cmd *cobra.Command, cl *clientOptions, deadline time.Duration, rpc func(context.Context, sitebootv1.SiteBootClient) (T, error)) (T, error) {
	var zero T
	api, _, done, err := cl.dial(cmd.Context())
	if err != nil {
		return zero, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(cmd.Context(), deadline)
	defer cancel()
	return rpc(ctx, api)
}

// relayReason is the relay code of a gRPC error the appliance returned for
// a relay (its google.rpc.ErrorInfo reason in the siteboot domain), or "".
func relayReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == "siteboot" && ei.GetReason() != "" {
			return ei.GetReason()
		}
	}
	return ""
}

// parseSPKI reads --spki-sha256: 64 hex digits, colons between bytes
// allowed (as openssl prints fingerprints); "" is no pin.
func parseSPKI(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) != 32 {
		return nil, errors.New("--spki-sha256: want the SHA-256 of the certificate's SubjectPublicKeyInfo as 64 hex digits")
	}
	return b, nil
}

// checkOutput refuses an --output other than table or json before any
// call is made.
func checkOutput(cl *clientOptions) error {
	if cl.output != "table" && cl.output != "json" {
		return fmt.Errorf("--output %q: want table or json", cl.output)
	}
	return nil
}
