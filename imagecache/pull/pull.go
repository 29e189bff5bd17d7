package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/internal/redact"
)

// The compressions a Request may name.
const (
	Zstd = "zstd"
	Gzip = "gzip"
)

// Config is what every pull shares. The image cache fills every field.
type Config struct {
	// Client sends the requests; it must not decompress (the pull sends
	// "Accept-Encoding: identity") nor set Client.Timeout.
	Client *http.Client
	// Retries is how many failed attempts in a row that added no data a
	// pull survives.
	Retries int
	// Backoff is the wait before retry attempt n, from 0.
	Backoff func(attempt int) time.Duration
	// Sleep waits d or until ctx ends.
	Sleep func(ctx context.Context, d time.Duration) error
	// StallTimeout aborts an attempt that receives nothing for this long.
	StallTimeout time.Duration
	// CheckpointBytes is how much data a plain pull writes between
	// checkpoints.
	CheckpointBytes int64
	// Logger receives the pulls' logs.
	Logger *slog.Logger
	// Bytes counts the bytes pulls write.
	Bytes prometheus.Counter
}

// Puller runs pulls. It holds no state of its own between them.
type Puller struct{ cfg Config }

// New returns a Puller for cfg.
func New(cfg Config) *Puller { return &Puller{cfg: cfg} }

// Request is one pull.
type Request struct {
	// URL is the origin; only redact.URL of it is ever logged.
	URL string
	// SHA256 is the digest of the image to keep (decoded, with a
	// Compression).
	SHA256 [32]byte
	// Compression is "", Zstd or Gzip.
	Compression string
	// SourceSHA256, optional with a Compression, is the digest of the
	// origin's compressed bytes.
	SourceSHA256 []byte
	// Size, when not 0, is the size the catalog gives the image: an origin
	// that announces another, or data (decoded data included) that grows
	// past it, fails the pull.
	Size int64
	// Part and Checkpoint are the paths of the data and of its checkpoint.
	Part, Checkpoint string
	// Progress is where the pull reports how far it is.
	Progress *Progress
	// Space is the cache's say on how much may be written.
	Space Space
	// ResumeReserve is the disk space a resume's copy of the data pulled
	// before must leave free (the cache's own reserve); 0: 64 MiB.
	ResumeReserve int64
}

// Progress is how far a pull is, for status views: the bytes written and
// the size the origin announced (-1 while unknown).
type Progress struct {
	Done, Total atomic.Int64
}

// Space is what a pull asks the cache before it writes. Its errors are
// final: the pull fails with them and is not retried.
type Space interface {
	// Admit is called once the image's size is known: total bytes, of
	// which off are on disk already. It may evict to make room.
	Admit(total, off int64) error
	// Check is called before every write with the size the data will
	// have after it.
	Check(size int64) error
}

// job is one pull of one image by one worker; only that worker touches it.
type job struct {
	p         *Puller
	req       Request
	log       *slog.Logger
	part      *os.File
	h         hash.Hash // SHA-256 of part[0:off]
	off       int64     // bytes written to part and hashed
	synced    int64     // bytes the last checkpoint covers
	total     int64     // the origin's size, -1 when unknown
	etag      string    // the origin's strong ETag, if any
	lastMod   string    // the origin's Last-Modified, if any
	resumed   bool      // the data on disk continues an earlier attempt or run
	fromZero  bool      // a resumed pull that failed its digest was restarted
	buf       []byte
	ckptEvery int64
}

// Pull fetches req into req.Part until the data is complete and verified,
// and leaves it fsynced, read-only and closed. It returns what fstat said
// of that file as it closed it (os.SameFile tells whether a file found
// later is the one verified). A pull cancelled through ctx keeps its data
// and checkpoint, and the next Pull of the same request resumes from
// there. On any other failure the caller deletes the files.
func (p *Puller) Pull(ctx context.Context, req Request) (os.FileInfo, error) {
	j, err := p.open(ctx, req)
	if err != nil {
		return nil, err
	}
	defer j.close()
	j.log.Info("imagecache: pulling", "url", redact.URL(req.URL), "offset", j.off)
	if err := j.run(ctx); err != nil {
		if ctx.Err() != nil {
			j.checkpoint() // best effort: the next run resumes from here
			return nil, ctx.Err()
		}
		return nil, err
	}
	return j.seal()
}

func (p *Puller) open(ctx context.Context, req Request) (*job, error) {
	every := p.cfg.CheckpointBytes
	j := &job{p: p, req: req, h: sha256.New(), total: -1,
		log: p.cfg.Logger.With("sha256", hex.EncodeToString(req.SHA256[:])),
		buf: make([]byte, min(every, 1<<20)), ckptEvery: every}
	if req.Compression == "" {
		err := j.resume(ctx)
		if err == nil {
			return j, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // the data and checkpoint stay: the next Run resumes
		}
		if !errors.Is(err, os.ErrNotExist) {
			j.log.Info("imagecache: checkpoint not usable, starting over", "err", err)
		}
	}
	f, err := createPart(req.Part)
	if err != nil {
		return nil, permanent(fmt.Errorf("create ingest file: %w", err))
	}
	j.part = f
	if err := j.reset(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// createPart creates the ingest file at path afresh, removing whatever
// is there first. A pull writes only to a file it created itself
// (O_EXCL): whatever else someone put at the path (a symbolic or hard link
// would have the image written over the file it names, any file when the
// service runs as root; a FIFO or device would block or take the bytes)
// is removed, or the creation fails if it comes back meanwhile. A checked
// open of an existing file cannot promise this: a hard link can be put
// there and taken away again between any two looks at it.
func createPart(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	const flags = unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	for errors.Is(err, unix.EINTR) {
		fd, err = unix.Open(path, flags, 0o600)
	}
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openRegular opens a file an earlier attempt left at path (an ingest
// file, a checkpoint) to read it only: a regular file at the path itself,
// opened without waiting (a FIFO there would wait for a writer), with its
// size.
func openRegular(path string) (*os.File, int64, error) {
	const flags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	fd, err := unix.Open(path, flags, 0)
	for errors.Is(err, unix.EINTR) {
		fd, err = unix.Open(path, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		err = errors.New("not a regular file (a link, or a socket)")
	}
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = errors.New("not a regular file")
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0) // O_NONBLOCK off
	}
	if err != nil {
		unix.Close(fd)
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st.Size, nil
}

func (j *job) close() {
	if j.part != nil {
		j.part.Close()
		j.part = nil
	}
}

// run makes attempts until the image is complete, retrying what a retry
// can fix with backoff.
func (j *job) run(ctx context.Context) error {
	cfg := j.p.cfg
	for attempt := 0; ; {
		start := j.off
		err := j.attempt(ctx)
		if err == nil {
			err = j.verify()
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errDigest) && j.resumed && !j.fromZero:
			j.log.Warn("imagecache: resumed pull failed its digest, starting over")
			j.fromZero = true
			if err := j.reset(); err != nil {
				return err
			}
			continue
		case isPermanent(err):
			return err
		case j.off > start:
			attempt = 0 // progress: not a failure in a row
			continue
		case attempt >= cfg.Retries:
			return fmt.Errorf("%w (after %d attempts)", err, attempt+1)
		}
		j.log.Info("imagecache: pull attempt failed, retrying", "attempt", attempt+1, "err", err)
		if err := cfg.Sleep(ctx, cfg.Backoff(attempt)); err != nil {
			return err
		}
		attempt++
	}
}

// verify is the final check: the streaming digest and the size. The file
// is not read again.
func (j *job) verify() error {
	if j.total >= 0 && j.off != j.total {
		return fmt.Errorf("origin sent %d of %d bytes", j.off, j.total)
	}
	sum := j.h.Sum(nil)
	if !bytes.Equal(sum, j.req.SHA256[:]) {
		return permanent(fmt.Errorf("%w: the %d bytes pulled have sha256 %x", errDigest, j.off, sum))
	}
	return nil
}

// reset drops the partial data: the next attempt starts from byte 0.
func (j *job) reset() error {
	j.off, j.synced, j.total, j.etag, j.lastMod, j.resumed = 0, 0, -1, "", "", false
	j.h.Reset()
	j.req.Progress.Done.Store(0)
	j.req.Progress.Total.Store(-1)
	if err := os.Remove(j.req.Checkpoint); err != nil && !errors.Is(err, os.ErrNotExist) {
		return permanent(fmt.Errorf("remove checkpoint: %w", err))
	}
	if err := j.part.Truncate(0); err != nil {
		return permanent(fmt.Errorf("truncate ingest file: %w", err))
	}
	if _, err := j.part.Seek(0, 0); err != nil {
		return permanent(fmt.Errorf("seek ingest file: %w", err))
	}
	return nil
}

// seal makes the verified data durable and read-only and closes it,
// returning what fstat says of it then.
func (j *job) seal() (os.FileInfo, error) {
	err := j.part.Sync()
	if err == nil {
		err = j.part.Chmod(0o444)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = j.part.Stat()
	}
	if cerr := j.part.Close(); err == nil {
		err = cerr
	}
	j.part = nil
	if err != nil {
		return nil, permanent(fmt.Errorf("sync ingest file: %w", err))
	}
	j.req.Progress.Done.Store(j.off)
	return fi, nil
}
