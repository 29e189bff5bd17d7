package imagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
)

// job is one pull of one image by one worker; only that worker touches it.
type job struct {
	c         *Cache
	e         *entry
	want      Want
	part      *os.File
	h         hash.Hash // SHA-256 of part[0:off]
	off       int64     // bytes written to part and hashed
	synced    int64     // bytes the last checkpoint covers
	spaceAt   int64     // offset of the next free-space check
	total     int64     // the origin's size, -1 when unknown
	etag      string    // the origin's strong ETag, if any
	lastMod   string    // the origin's Last-Modified, if any
	resumed   bool      // the data on disk continues an earlier attempt or run
	fromZero  bool      // a resumed pull that failed its digest was restarted
	buf       []byte
	ckptEvery int64
}

// pull fetches want into the ingest area and commits it to the blob
// directory when its digest and size check out.
func (c *Cache) pull(ctx context.Context, e *entry, want Want) error {
	j, err := c.openJob(e, want)
	if err != nil {
		return err
	}
	defer j.close()
	c.log.Info("imagecache: pulling", "sha256", hexOf(want.SHA256), "url", redactURL(want.URL), "offset", j.off)
	if err := j.run(ctx); err != nil {
		if ctx.Err() != nil {
			j.checkpoint() // best effort: the next run resumes from here
			return ctx.Err()
		}
		return err
	}
	return j.commit()
}

func (c *Cache) openJob(e *entry, want Want) (*job, error) {
	f, err := os.OpenFile(c.partPath(want.SHA256), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, permanent(fmt.Errorf("open ingest file: %w", err))
	}
	every := c.cfg.CheckpointBytes
	j := &job{c: c, e: e, want: want, part: f, h: sha256.New(), total: -1,
		buf: make([]byte, min(every, 1<<20)), ckptEvery: every}
	if want.Compression == CompressionNone {
		err := j.resume()
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			c.log.Info("imagecache: checkpoint not usable, starting over", "sha256", hexOf(want.SHA256), "err", err)
		}
	}
	if err := j.reset(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
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
	cfg := j.c.cfg
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
			j.c.log.Warn("imagecache: resumed pull failed its digest, starting over", "sha256", hexOf(j.want.SHA256))
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
		j.c.log.Info("imagecache: pull attempt failed, retrying", "sha256", hexOf(j.want.SHA256), "attempt", attempt+1, "err", err)
		if err := cfg.Sleep(ctx, cfg.Backoff(attempt)); err != nil {
			return err
		}
		attempt++
	}
}

// verify is the commit-time check: the streaming digest and the size. The
// file is not read again.
func (j *job) verify() error {
	if j.total >= 0 && j.off != j.total {
		return fmt.Errorf("origin sent %d of %d bytes", j.off, j.total)
	}
	sum := j.h.Sum(nil)
	if !bytes.Equal(sum, j.want.SHA256[:]) {
		return permanent(fmt.Errorf("%w: the %d bytes pulled have sha256 %x", errDigest, j.off, sum))
	}
	return nil
}

// reset drops the partial data: the next attempt starts from byte 0.
func (j *job) reset() error {
	j.off, j.synced, j.spaceAt, j.total, j.etag, j.lastMod, j.resumed = 0, 0, 0, -1, "", "", false
	j.h.Reset()
	j.e.done.Store(0)
	j.e.total.Store(-1)
	if err := os.Remove(j.c.ckptPath(j.want.SHA256)); err != nil && !errors.Is(err, os.ErrNotExist) {
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

// commit makes the verified file a blob: fsync, read-only, rename into the
// blob directory, fsync the directory.
func (j *job) commit() error {
	d := j.want.SHA256
	err := j.part.Sync()
	if err == nil {
		err = j.part.Chmod(0o444)
	}
	if cerr := j.part.Close(); err == nil {
		err = cerr
	}
	j.part = nil
	if err == nil {
		err = os.Rename(j.c.partPath(d), j.c.blobPath(d))
	}
	if err == nil {
		if err = syncDir(j.c.blobDir); err != nil {
			j.c.removeBlob(d)
		}
	}
	if err != nil {
		return permanent(fmt.Errorf("commit: %w", err))
	}
	if err := os.Remove(j.c.ckptPath(d)); err != nil && !errors.Is(err, os.ErrNotExist) {
		j.c.log.Warn("imagecache: remove checkpoint", "sha256", hexOf(d), "err", err)
	}
	j.e.done.Store(j.off)
	return nil
}
