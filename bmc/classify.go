package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/siteboot/siteboot/internal/relayerr"
)

type phase int

const (
	phaseOpen phase = iota
	phaseOperation
)

// fastRefusal: an ipmitool session that fails sooner than this was
// refused by a BMC that answered (wrong user or password); with no answer
// at all ipmitool waits its 5 s timeout at least.
const fastRefusal = 3 * time.Second

// classify reduces a failure to a code and a message we write. Library
// error text is never passed on (it can hold URLs, bodies or command
// output); the code comes from what the transport saw and, for ipmitool,
// from a fixed phrase of its output.
func classify(ctx context.Context, p *plan, ph phase, err error, tr *trace, elapsed time.Duration) *relayerr.Error {
	var re *relayerr.Error
	if errors.As(err, &re) {
		return re
	}
	if expired(ctx) || errors.Is(err, context.DeadlineExceeded) {
		return relayerr.New(relayerr.Timeout, "%s %s at %s: the deadline passed", p.driver, p.op, p.target)
	}
	if p.driver == driverIPMI {
		return classifyIPMI(p, ph, err, elapsed)
	}
	t := tr.snapshot()
	switch {
	case t.wrongAddr:
		return relayerr.New(relayerr.Internal, "refused to dial an address other than the checked %s", p.target)
	case t.pinFailed:
		return relayerr.New(relayerr.PinMismatch, "the certificate of %s does not match tls_spki_sha256", p.target)
	case t.tlsErr != nil:
		return relayerr.New(relayerr.TLSFailed, "TLS handshake with %s failed", p.target)
	case t.dialErr != nil:
		return relayerr.New(relayerr.Unreachable, "cannot connect to %s: %s", p.target, dialReason(t.dialErr))
	case t.tooLarge || errors.Is(err, errResponseSize):
		return relayerr.New(relayerr.BMCError, "%s sent a response larger than %d bytes, or more than %d bytes or %d responses in all",
			p.target, maxResponseBytes, maxOperationBytes, maxOperationRequests)
	}
	for _, st := range t.statuses {
		if st == 401 || st == 403 {
			return relayerr.New(relayerr.AuthFailed, "%s refused the credentials (HTTP %d)", p.target, st)
		}
	}
	if ph == phaseOpen {
		return relayerr.New(relayerr.BMCError, "%s answered but no Redfish session could be opened%s", p.target, lastError(t.statuses))
	}
	return relayerr.New(relayerr.BMCError, "%s refused or failed %s%s", p.target, p.op, lastError(t.statuses))
}

func classifyIPMI(p *plan, ph phase, err error, elapsed time.Duration) *relayerr.Error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return relayerr.New(relayerr.Internal, "cannot run ipmitool")
	}
	if strings.Contains(err.Error(), "Unable to establish IPMI v2 / RMCP+ session") {
		if elapsed < fastRefusal {
			return relayerr.New(relayerr.AuthFailed, "%s refused the IPMI session (user, password or cipher suite)", p.target)
		}
		return relayerr.New(relayerr.Unreachable, "no IPMI answer from %s", p.target)
	}
	if ph == phaseOpen {
		return relayerr.New(relayerr.BMCError, "%s answered but the IPMI power status failed", p.target)
	}
	return relayerr.New(relayerr.BMCError, "%s refused or failed %s", p.target, p.op)
}

// expired reports whether ctx has ended or its deadline has passed: a
// connection given that deadline can time out a moment before ctx's own
// timer fires.
func expired(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// lastError names the last HTTP error status, when there was one.
func lastError(statuses []int) string {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i] >= 400 {
			return fmt.Sprintf(" (HTTP %d)", statuses[i])
		}
	}
	return ""
}

func dialReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.As(err, &ne) && ne.Timeout():
		return "connect timed out"
	}
	return "connect failed"
}
