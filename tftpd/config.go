package tftpd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxBlockSize is the largest blksize granted by default: a
// 1500-byte Ethernet MTU less 20 bytes of IPv4 header, 8 of UDP and 4 of
// TFTP, so a DATA packet never needs IP fragmentation.
const DefaultMaxBlockSize = 1468

// Defaults of Config.
const (
	DefaultTimeout = time.Second
	DefaultRetries = 5
	// DefaultMaxTransfers bounds the transfers running at once. A machine
	// runs one transfer at a time (edk2's tsize probe ends before its real
	// request), and under a boot storm one takes a second or more (ipxe.efi
	// is 145 windows of 4 blocks, each a round trip to a busy firmware):
	// a 1,000-machine storm whose starts spread over 3 s had 400 running
	// at once, and with 256 places dropped 250 to 2,800 requests, each a
	// 4 s firmware retransmission (bench/storm.sh). 1024 holds such a
	// storm while a client that went quiet after its first acknowledgement
	// holds its place for Timeout×Retries (5 s); one that never
	// acknowledged gives its place up to a new request after 500 ms once
	// all are taken. Each transfer holds two fds (its socket and the
	// file) and one window of blocks: 2,048 fds and at most 24 MiB at the
	// defaults.
	DefaultMaxTransfers = 1024
	// DefaultMaxPerSource bounds the transfers of one client address: one
	// machine needs one, a few machines behind one NAT address need a few,
	// and one address cannot take more than 1/32 of DefaultMaxTransfers.
	DefaultMaxPerSource = 8
	// DefaultMaxWindowSize is the largest windowsize granted by default.
	// edk2 asks 4 (PcdPxeTftpWindowSize) and gets it; 16 leaves room for
	// a client that asks more, while 16 blocks of 1468 bytes (23 KiB) stay
	// well inside the 64 KiB cap on a window.
	DefaultMaxWindowSize = 16
)

// maxTransfersLimit is the largest MaxTransfers accepted.
const maxTransfersLimit = 16384

// maxWindowLimit is the largest MaxWindowSize accepted. The 64 KiB cap on
// a window's blocks allows at most 64 of 1 KiB or more; this keeps smaller
// blocks to as many packets.
const maxWindowLimit = 64

// Files is the set of files the server serves; *images.Set satisfies it.
type Files interface {
	// Open opens the file with exactly this name and returns its size. An
	// error matching fs.ErrNotExist is reported to the client as "file
	// not found", running out of file descriptors drops the request (the
	// client retries), any other error is "access violation".
	Open(name string) (*os.File, int64, error)
}

// Config configures a Server.
type Config struct {
	// Files are the files served (required).
	Files Files
	// MaxBlockSize caps the blksize option (RFC 2348) granted to clients;
	// DefaultMaxBlockSize if zero, otherwise 512..65464 (512: never more
	// than RFC 1350's blocks). The arrival interface's MTU less 32 bytes
	// (52 for IPv6) caps it further, so DATA packets do not fragment.
	MaxBlockSize int
	// MaxWindowSize caps the windowsize option (RFC 7440): how many DATA
	// packets are sent before waiting for an ACK. DefaultMaxWindowSize if
	// zero, otherwise 1..64 (1: lock step, as RFC 1350). A window never
	// holds more than 64 KiB of blocks, so large blocks get fewer.
	MaxWindowSize int
	// Timeout is how long an OACK or a window of DATA packets waits for an
	// acknowledgement before it is sent again (DefaultTimeout if zero);
	// Retries how many times it is sent in all (DefaultRetries if zero).
	// A transfer may take Retries plus 60 Timeouts, or plus one per 8 KiB
	// of the file if that is more, then it ends with an ERROR (timeLimit).
	Timeout time.Duration
	Retries int
	// MaxTransfers bounds the transfers running at once
	// (DefaultMaxTransfers if zero, at most 16384); MaxPerSource those of
	// one client IP address (DefaultMaxPerSource if zero). A request over
	// either bound is dropped without an answer, so the client's own
	// retransmission tries again; it opens no socket and starts nothing.
	// When MaxTransfers are running, a new request instead takes the place
	// of the oldest transfer whose client has acknowledged nothing for
	// 500 ms or more (forged sources never do), which ends without an
	// ERROR; a transfer once acknowledged is never cut short that way.
	MaxTransfers int
	MaxPerSource int
	// Logger receives one line per transfer and refusal, rate-limited per
	// kind (discarded if nil).
	Logger *slog.Logger
	// Metrics registers the siteboot_tftp_* collectors (none if nil).
	Metrics prometheus.Registerer
}

// ConfigError is a Config field with a value New refuses. Field is the
// Go name of the field.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "tftpd: " + e.Field + ": " + e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }

// Check checks the settings of c that have a range (not Files), as New
// does: the appliance's config check calls it so that both agree. It
// returns a *ConfigError for the first field out of range.
func (c Config) Check() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.MaxBlockSize != 0 && (c.MaxBlockSize < minBlockSize || c.MaxBlockSize > maxBlockSize):
		return bad("MaxBlockSize", "%d is outside %d..%d (0 for %d)", c.MaxBlockSize, minBlockSize, maxBlockSize, DefaultMaxBlockSize)
	case c.MaxWindowSize < 0 || c.MaxWindowSize > maxWindowLimit:
		return bad("MaxWindowSize", "%d is outside 1..%d (0 for %d)", c.MaxWindowSize, maxWindowLimit, DefaultMaxWindowSize)
	case c.Timeout < 0:
		return bad("Timeout", "%s must not be negative", c.Timeout)
	case c.Retries < 0:
		return bad("Retries", "%d must not be negative", c.Retries)
	case c.MaxTransfers < 0 || c.MaxTransfers > maxTransfersLimit:
		return bad("MaxTransfers", "%d is outside 1..%d (0 for %d)", c.MaxTransfers, maxTransfersLimit, DefaultMaxTransfers)
	case c.MaxPerSource < 0:
		return bad("MaxPerSource", "%d must not be negative (0 for %d)", c.MaxPerSource, DefaultMaxPerSource)
	}
	return nil
}

// withDefaults checks c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Files == nil {
		return c, errors.New("tftpd: Config.Files is required")
	}
	if err := c.Check(); err != nil {
		return c, err
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBlockSize, DefaultMaxBlockSize)
	def(&c.MaxWindowSize, DefaultMaxWindowSize)
	def(&c.Retries, DefaultRetries)
	def(&c.MaxTransfers, DefaultMaxTransfers)
	def(&c.MaxPerSource, DefaultMaxPerSource)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
