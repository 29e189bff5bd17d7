package admin

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/relayerr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// relayOutcome is what a caller of the API sees of a relay error.
type relayOutcome struct {
	Code    codes.Code
	Message string
	Reasons []string // the ErrorInfo reasons
	Domains []string
}

func outcomeOf(err error) relayOutcome {
	st := status.Convert(err)
	o := relayOutcome{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			o.Reasons = append(o.Reasons, ei.GetReason())
			o.Domains = append(o.Domains, ei.GetDomain())
		}
	}
	return o
}

// Every relay code maps to the gRPC code the API's contract names, with the
// message "code: message" and one ErrorInfo whose reason is the code, also
// when the error arrives wrapped.
func TestRelayStatus(t *testing.T) {
	tests := []struct {
		code string
		want codes.Code
	}{
		{relayerr.ForbiddenTarget, codes.PermissionDenied},
		{relayerr.InvalidArgs, codes.InvalidArgument},
		{relayerr.Unreachable, codes.Unavailable},
		{relayerr.Timeout, codes.DeadlineExceeded},
		{relayerr.PinMismatch, codes.FailedPrecondition},
		{relayerr.TLSFailed, codes.FailedPrecondition},
		{relayerr.CredentialsUnavailable, codes.FailedPrecondition},
		{relayerr.Busy, codes.ResourceExhausted},
		{relayerr.Unsupported, codes.Unimplemented},
		{relayerr.AuthFailed, codes.FailedPrecondition},
		{relayerr.BMCError, codes.FailedPrecondition},
		{relayerr.Internal, codes.Internal},
		{"a-code-from-the-future", codes.Internal},
	}
	for _, tt := range tests {
		e := relayerr.New(tt.code, "node %s has no proxy target", "talos-1")
		want := relayOutcome{Code: tt.want, Message: tt.code + ": node talos-1 has no proxy target",
			Reasons: []string{tt.code}, Domains: []string{"siteboot"}}
		for name, err := range map[string]error{"bare": e, "wrapped": fmt.Errorf("httpproxy: %w", e)} {
			if diff := cmp.Diff(want, outcomeOf(grpcError(err))); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", name, tt.code, diff)
			}
		}
	}
}

// The interceptor maps the handler's error again: a relay status must pass
// through grpcError unchanged, details included.
func TestRelayStatusSurvivesASecondMapping(t *testing.T) {
	once := grpcError(relayerr.New(relayerr.Busy, "16 requests at once"))
	if diff := cmp.Diff(outcomeOf(once), outcomeOf(grpcError(once))); diff != "" {
		t.Fatalf("second mapping changed the status (-once +twice):\n%s", diff)
	}
}

// Every code package relayerr declares has its own entry in relayCodes:
// a new code cannot silently become Internal.
func TestRelayCodesCoverEveryCode(t *testing.T) {
	declared := relayerrCodes(t)
	var mapped []string
	for c := range relayCodes {
		mapped = append(mapped, c)
	}
	sort.Strings(declared)
	sort.Strings(mapped)
	if diff := cmp.Diff(declared, mapped); diff != "" {
		t.Fatalf("relayCodes (admin/relays.go) against relayerr's codes (-declared +mapped):\n%s", diff)
	}
}

// relayerrCodes reads the string constants of package relayerr's source.
func relayerrCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../internal/relayerr/relayerr.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, s)
				}
			}
		}
	}
	if len(out) < 12 {
		t.Fatalf("read %d codes from relayerr.go; it declares 12 or more", len(out))
	}
	return out
}
