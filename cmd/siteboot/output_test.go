package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// -o json is for scripts, and some compare it byte for byte: protojson
// varies its whitespace from one build to the next on purpose, printJSON
// must not.
func TestPrintJSONIsStable(t *testing.T) {
	res := &sitev1.BmcOperationResult{ErrorCode: "forbidden-target", Message: "address 10.21.0.8 is not inside bmc.networks"}
	var got bytes.Buffer
	if err := printJSON(&got, res); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"errorCode\": \"forbidden-target\",\n  \"message\": \"address 10.21.0.8 is not inside bmc.networks\"\n}\n"
	if got.String() != want {
		t.Errorf("printJSON = %q, want %q", got.String(), want)
	}
	var canon bytes.Buffer
	if err := json.Indent(&canon, got.Bytes(), "", "  "); err != nil || canon.String() != got.String() {
		t.Errorf("printJSON is not in json.Indent's form: %q (%v)", got.String(), err)
	}
}

// The same through the binary a script runs: a failed BMC operation with
// -o json prints the result in json.Indent's form, and its line on stderr.
// protojson's extra spaces depend on a hash of the binary, so printing
// protojson's own form fails this test on about half of all builds, not on
// every one.
func TestBmcJSONOutputIsStable(t *testing.T) {
	r := startRelayServe(t, "[]")
	out, errOut, code := r.run(t, "bmc", "--driver", "ipmi", "--address", "10.20.0.11", "--credentials-ref", "env://SITEBOOT_SECRET_X", "-o", "json", "power.getPower")
	want := "{\n  \"errorCode\": \"forbidden-target\",\n  \"message\": \"bmc.networks is empty: no BMC operation is allowed\"\n}\n"
	if code != 1 || out != want || !strings.HasPrefix(errOut, "bmc: forbidden-target: ") {
		t.Errorf("bmc -o json: exit %d, stdout %q, stderr %q; want exit 1, stdout %q", code, out, errOut, want)
	}
}
