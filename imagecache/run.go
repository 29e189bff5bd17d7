package imagecache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/siteboot/siteboot/imagecache/pull"
	"github.com/siteboot/siteboot/internal/atomicfile"
	"github.com/siteboot/siteboot/internal/redact"
)

// Run pulls the queued images with Config.Concurrency workers, verifies
// again the blobs Open (or a request, while it runs) found changed, requeues failed images after
// Config.RetryFailed and persists last-used times (and writes the counts
// of rate-limited failure lines) every Config.FlushInterval, until ctx
// ends. A pull interrupted by ctx keeps its
// checkpoint and resumes at the next Run. Call it once.
func (c *Cache) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Go(func() { c.worker(ctx) })
	}
	wg.Go(func() { c.verifyAll(ctx) })
	c.kickWorkers()
	t := time.NewTicker(c.cfg.FlushInterval)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			c.tick()
			c.srv.FlushLogs(false)
		}
	}
	wg.Wait()
	c.srv.FlushLogs(true)
	return c.persist()
}

// tick requeues failed images whose wait is over and flushes last-used
// times when they changed.
func (c *Cache) tick() {
	c.mu.Lock()
	now, requeued := c.cfg.Now(), false
	for _, e := range c.entries {
		if e.state == StateFailed && e.wanted() && c.cfg.RetryFailed > 0 && !now.Before(e.failedAt.Add(c.cfg.RetryFailed)) {
			c.queueLocked(e)
			requeued = true
		}
	}
	dirty := c.dirty || requeued
	if requeued {
		c.notifyLocked()
	}
	c.mu.Unlock()
	if requeued {
		c.kickWorkers()
	}
	if dirty {
		c.persistLogged()
	}
}

func (c *Cache) worker(ctx context.Context) {
	for {
		e, want, pctx, cancel := c.next(ctx)
		if e == nil {
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
				continue
			}
		}
		c.kickWorkers() // another worker may find more queued
		err := c.pull(pctx, e, want)
		cancelled := pctx.Err() != nil // by a release, a source change or the end of Run
		cancel()
		c.finish(ctx, e, err, cancelled)
	}
}

// next hands the oldest queued entry to a worker.
func (c *Cache) next(ctx context.Context) (*entry, Want, context.Context, context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		return nil, Want{}, nil, nil
	}
	var pick *entry
	for _, e := range c.entries {
		if e.state == StateQueued && !e.busy && (pick == nil || e.queued < pick.queued) {
			pick = e
		}
	}
	if pick == nil {
		return nil, Want{}, nil, nil
	}
	pctx, cancel := context.WithCancel(ctx)
	pick.state, pick.busy, pick.cancel, pick.restart = StatePulling, true, cancel, false
	c.notifyLocked()
	return pick, pick.want, pctx, cancel
}

// pull fetches want into the ingest area (package pull) and commits the
// verified file to the blob directory.
func (c *Cache) pull(ctx context.Context, e *entry, want Want) error {
	d := want.SHA256
	sealed, err := c.puller.Pull(ctx, pull.Request{
		URL: want.URL, SHA256: d, Compression: want.Compression, SourceSHA256: want.SourceSHA256, Size: want.Size,
		Part: c.partPath(d), Checkpoint: c.ckptPath(d), Progress: &e.progress, Space: &space{c: c, e: e},
		ResumeReserve: c.cfg.MinFree,
	})
	if err != nil {
		return err
	}
	return c.commit(e, sealed)
}

// commit renames a verified ingest file (sealed, as the pull left it) into
// the blob directory, makes the rename durable, and records the file it
// now is. The stamp recorded is that of the file at the blob path, which
// must be the one pulled: a file put there (or at the ingest path) by
// someone else between the pull and the stamp would otherwise be served
// as verified. Same device and inode, size and mtime (a write changes it;
// the rename changes ctime, so ctime cannot be compared); anything else
// fails the pull, and the file found is deleted.
func (c *Cache) commit(e *entry, sealed os.FileInfo) error {
	d := e.digest
	if err := os.Rename(c.partPath(d), c.blobPath(d)); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if c.commitRenamed != nil {
		c.commitRenamed(c.blobPath(d))
	}
	err := atomicfile.SyncDir(c.blobDir)
	var st stamp
	if err == nil {
		var fi os.FileInfo
		fi, err = os.Lstat(c.blobPath(d))
		switch {
		case err != nil:
		case !fi.Mode().IsRegular() || !os.SameFile(fi, sealed) || fi.Size() != sealed.Size() || !fi.ModTime().Equal(sealed.ModTime()):
			err = errors.New("the blob's path holds another file than the one pulled and verified (replaced on disk during the commit)")
		default:
			st = stampOfInfo(fi)
		}
	}
	if err != nil {
		c.removeBlob(d)
		return fmt.Errorf("commit: %w", err)
	}
	if err := os.Remove(c.ckptPath(d)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("imagecache: remove checkpoint", "sha256", hexOf(d), "err", err)
	}
	c.mu.Lock()
	e.stamp = st
	c.mu.Unlock()
	return nil
}

// finish records the end of a pull.
func (c *Cache) finish(runCtx context.Context, e *entry, err error, cancelled bool) {
	c.mu.Lock()
	e.busy, e.cancel = false, nil
	d, result := e.digest, "ok"
	switch {
	case err == nil:
		e.state, e.size, e.lastUsed, e.reason = StateReady, e.stamp.Size, c.cfg.Now(), ""
		c.log.Info("imagecache: image ready", "sha256", hexOf(d), "size", e.size)
	case !e.wanted():
		result = "cancelled"
		c.removeIngestLocked(d)
		delete(c.entries, d)
	case e.restart:
		result = "cancelled"
		c.removeIngestLocked(d)
		c.queueLocked(e)
	case runCtx.Err() != nil:
		result = "cancelled"
		c.queueLocked(e) // resumes from its checkpoint at the next Run
	case err != nil && cancelled:
		// Released (which cancels the pull), then wanted again before
		// the pull stopped: it goes on from its checkpoint, not failed.
		// (Decided by the pull's context, not its error: an error that
		// only says "canceled" must not requeue a pull for ever.)
		result = "cancelled"
		c.queueLocked(e)
	default:
		result = "failed"
		e.state, e.reason, e.failedAt = StateFailed, err.Error(), c.cfg.Now()
		c.removeIngestLocked(d)
		c.log.Warn("imagecache: pull failed", "sha256", hexOf(d), "url", redact.URL(e.want.URL), "err", err)
	}
	c.m.pulls.WithLabelValues(result).Inc()
	c.settleLocked()
	c.persistLogged()
}
