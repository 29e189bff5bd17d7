package relayerr

import (
	"fmt"
	"testing"
)

func TestCode(t *testing.T) {
	e := New(ForbiddenTarget, "host %s is not allowed", "10.0.0.9")
	if got := e.Error(); got != "forbidden-target: host 10.0.0.9 is not allowed" {
		t.Errorf("Error() = %q", got)
	}
	if got := Code(fmt.Errorf("wrapped: %w", e)); got != ForbiddenTarget {
		t.Errorf("Code(wrapped) = %q, want %q", got, ForbiddenTarget)
	}
	if got := Code(fmt.Errorf("plain")); got != Internal {
		t.Errorf("Code(plain) = %q, want %q", got, Internal)
	}
}
