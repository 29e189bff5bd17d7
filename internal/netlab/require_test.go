package netlab

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// outcomeTB records how Require ended a test instead of ending this one.
type outcomeTB struct {
	testing.TB
	outcome string
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skip(args ...any) {
	o.outcome = "skip: " + fmt.Sprint(args...)
	runtime.Goexit()
}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.outcome = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.outcome = "fail: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRequire(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name  string
		env   string
		needs Needs
		want  string // outcome prefix: "skip", "fail" or "" for "runs"
	}{
		{name: "missing binary skips", needs: Needs{Binaries: []string{"sbt-no-such-binary"}}, want: "skip"},
		{name: "missing binary fails under require", env: "require", needs: Needs{Binaries: []string{"sbt-no-such-binary"}}, want: "fail"},
		{name: "missing file fails under require", env: "require", needs: Needs{Files: []string{"/sbt/no/such/file"}}, want: "fail"},
		{name: "other env values still skip", env: "1", needs: Needs{Files: []string{"/sbt/no/such/file"}}, want: "skip"},
		{name: "all present runs", env: "require", needs: Needs{Binaries: []string{"sh"}}, want: map[bool]string{true: "", false: "fail"}[root]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.env)
			o := &outcomeTB{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); Require(o, tc.needs) }()
			<-done
			got, _, _ := strings.Cut(o.outcome, ":")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Require outcome %q mismatch (-want +got):\n%s", o.outcome, diff)
			}
		})
	}
}
