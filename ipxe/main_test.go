package ipxe

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the golden scripts in testdata/")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
