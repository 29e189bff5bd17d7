package admin

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every rule of the table maps a wrapped instance of its error to its code,
// with the error's text as the message.
func TestCodeTable(t *testing.T) {
	for _, r := range codeTable {
		var err error
		if r.is != nil {
			err = r.is
		} else {
			err = reflect.New(r.as.Elem()).Interface().(error)
		}
		wrapped := fmt.Errorf("during a call: %w", err)
		got := grpcError(wrapped)
		if status.Code(got) != r.code {
			t.Errorf("grpcError(%T wrapped) = %v, want %v", err, status.Code(got), r.code)
		}
		if msg := status.Convert(got).Message(); msg != wrapped.Error() {
			t.Errorf("grpcError(%T wrapped) message = %q; want the error text %q", err, msg, wrapped.Error())
		}
	}
	if grpcError(nil) != nil {
		t.Error("grpcError(nil) != nil")
	}
	if got := grpcError(errors.New("boom")); status.Code(got) != codes.Internal {
		t.Errorf("an unknown error maps to %v, want Internal", status.Code(got))
	}
	kept := status.Error(codes.PermissionDenied, "kept")
	if got := grpcError(kept); got != kept {
		t.Errorf("a status error was changed: %v", got)
	}
}

// notInTable are the exported domain errors the API never returns, with why.
var notInTable = map[string]string{
	"ipxe.UnknownMachineError":    "the core turns it into the unknown-machine script",
	"site.ErrUnknownCommand":      "raised inside the state machine for a log entry it cannot decode; Internal is right",
	"dhcpproxy.ErrNoInterfaces":   "a start-up condition, never an API result",
	"serve.ErrMalformedPath":      "an HTTP path error of /cache/",
	"imagecache.ErrMalformedPath": "an HTTP path error of /cache/ (an alias of serve's)",
	"images.ErrInvalidName":       "a boot-file lookup of /boot/ or TFTP",
	"images.ErrNotFound":          "a boot-file lookup of /boot/ or TFTP",
	"images.ErrChanged":           "a boot-file lookup of /boot/ or TFTP",
	"secretref.PolicyError":       "a start-up configuration error of secrets.*",
	"tftpd.ConfigError":           "a start-up configuration error of tftp.*",
	"lease.TransportError":        "a start-up configuration error of lease.raft.*",
	"discovery.AssertionError":    "VerifyAssertion answers a refused assertion as valid=false with its reason",
	"relayerr.Error":              "mapped by its code (relayCodes, relays.go), with an ErrorInfo",
}

// domainPackages are the packages whose errors can reach the API.
var domainPackages = []string{"appliance", "site", "lease", "ipxe", "imagecache", "secretref", "discovery", "dhcpproxy", "images", "tftpd",
	"bmc", "httpproxy", "internal/relayerr"}

// Every exported error of a domain package is in the table or in
// notInTable: a new error type cannot silently become Internal.
func TestCodeTableCoversDomainErrors(t *testing.T) {
	inTable := tableNames(t)
	for _, pkg := range domainPackages {
		for _, name := range exportedErrors(t, filepath.Join("..", pkg)) {
			if !slices.Contains(inTable, name) && notInTable[name] == "" {
				t.Errorf("%s is not in codeTable (admin/errors.go) nor in notInTable", name)
			}
		}
	}
}

// tableNames reads codeTable's source: "pkg.Name" for every rule.
func tableNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.IndexExpr: // as[*pkg.T](code)
			if star, ok := fn.Index.(*ast.StarExpr); ok {
				names = append(names, exprName(star.X))
			}
		case *ast.Ident: // is(pkg.ErrX, code)
			if fn.Name == "is" && len(call.Args) == 2 {
				names = append(names, exprName(call.Args[0]))
			}
		}
		return true
	})
	if len(names) < len(codeTable) {
		t.Fatalf("read %d rules from errors.go, codeTable has %d", len(names), len(codeTable))
	}
	return names
}

func exprName(e ast.Expr) string {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok {
			return id.Name + "." + sel.Sel.Name
		}
	}
	return fmt.Sprintf("%T", e)
}

// exportedErrors lists "pkg.Name" for the exported `type XError struct`
// declarations and `ErrX = errors.New(…)` variables of the package in dir
// and its sub-packages.
func exportedErrors(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					if sp.Name.IsExported() && strings.HasSuffix(sp.Name.Name, "Error") {
						out = append(out, f.Name.Name+"."+sp.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
							out = append(out, f.Name.Name+"."+n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
