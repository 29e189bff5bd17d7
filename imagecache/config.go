package imagecache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Pinner says which images must stay: those an entry's sanboot_sha256 or the
// ramdisk profile references. It is called with the cache's lock held and
// must not call back into the cache.
type Pinner interface {
	Pinned(digest [32]byte) bool
}

// Config configures a Cache. Zero values take the defaults noted.
type Config struct {
	// Dir is the data directory (required); see README.md for the layout.
	Dir string
	// Capacity bounds the bytes of blobs; 0 means unbounded. Released
	// images are evicted least recently used first to stay under it.
	Capacity int64
	// MinFree is disk space pulls leave free on the file system of Dir,
	// which may also hold the raft log (default: the larger of 1 GiB and
	// 5 % of that file system's size). A pull that would go below it
	// fails and its partial data is deleted; one whose size is known fails
	// before it writes.
	MinFree int64
	// Concurrency is the number of pulls at once (default 2).
	Concurrency int
	// HTTPClient pulls the images (default: a client with its own
	// transport). The appliance builds it with TLS verification and any
	// extra CA bundle. The cache sends "Accept-Encoding: identity", so the
	// transport never decompresses, and refuses redirects from https to
	// http.
	HTTPClient *http.Client
	// Retries is how many times in a row a pull retries a failed attempt
	// before the image is marked failed (default 5); an attempt that
	// added data resets the count.
	Retries int
	// Backoff is the wait before retry attempt n, from 0 (default 1 s
	// doubling, at most 1 min).
	Backoff func(attempt int) time.Duration
	// Sleep waits d or until ctx ends (default: a timer). Tests inject one
	// that does not sleep.
	Sleep func(ctx context.Context, d time.Duration) error
	// StallTimeout aborts an attempt that receives no byte for this long
	// (default 1 min).
	StallTimeout time.Duration
	// CheckpointBytes is how much data a pull writes between checkpoints
	// (fdatasync of the data, then the hash state); default 64 MiB.
	CheckpointBytes int64
	// FlushInterval is how often Run persists last-used times (default
	// 5 min); they are kept in memory between flushes, never written per
	// request.
	FlushInterval time.Duration
	// RetryFailed is how long a failed wanted image waits before Run
	// queues it again (default 1 h; negative: never, only Add, a changed
	// URL in SetWanted or a restart retries it).
	RetryFailed time.Duration
	// RetryAfter is the Retry-After the Handler sends with 503 for an image
	// still pulling (default 5 s).
	RetryAfter time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the cache's logs (default: discarded).
	Logger *slog.Logger
	// Metrics registers the cache's metrics when set.
	Metrics prometheus.Registerer
	// Pins keeps referenced images from eviction and "image rm" (default:
	// nothing pinned).
	Pins Pinner
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("imagecache: config: Dir is required")
	}
	if c.Capacity < 0 || c.MinFree < 0 {
		return c, errors.New("imagecache: config: Capacity and MinFree must not be negative")
	}
	setDefault(&c.Concurrency, 2)
	setDefault(&c.Retries, 5)
	setDefault(&c.StallTimeout, time.Minute)
	setDefault(&c.CheckpointBytes, 64<<20)
	setDefault(&c.FlushInterval, 5*time.Minute)
	setDefault(&c.RetryFailed, time.Hour)
	setDefault(&c.RetryAfter, 5*time.Second)
	if c.Backoff == nil {
		c.Backoff = defaultBackoff
	}
	if c.Sleep == nil {
		c.Sleep = sleepCtx
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

func defaultBackoff(attempt int) time.Duration {
	if attempt > 6 {
		return time.Minute
	}
	return min(time.Second<<attempt, time.Minute)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
