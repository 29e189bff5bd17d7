package imagecache

import (
	"fmt"
	"io"
)

// copyFrom streams r into the ingest file and the hash in one pass, with
// the large buffer; it returns nil at r's EOF.
func (j *job) copyFrom(r io.Reader) error {
	for {
		n, rerr := fill(r, j.buf)
		if n > 0 {
			if err := j.write(j.buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// fill reads until buf is full or r fails; unlike io.ReadFull it passes a
// short body's io.ErrUnexpectedEOF through as the failure it is.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// write appends p to the data and the hash, checkpoints every
// CheckpointBytes, and watches the capacity and the disk.
func (j *job) write(p []byte) error {
	cfg := j.c.cfg
	if cfg.Capacity > 0 && j.off+int64(len(p)) > cfg.Capacity {
		return permanentf("image is larger than the cache capacity of %d bytes", cfg.Capacity)
	}
	if _, err := j.part.Write(p); err != nil {
		return permanent(fmt.Errorf("write %s.part: %w", hexOf(j.want.SHA256), err))
	}
	j.h.Write(p)
	j.off += int64(len(p))
	j.e.done.Store(j.off)
	j.c.m.pullBytes.Add(float64(len(p)))
	if j.off >= j.spaceAt {
		j.spaceAt = j.off + j.ckptEvery
		if err := j.checkSpace(); err != nil {
			return err
		}
	}
	if j.want.Compression == CompressionNone && j.off-j.synced >= j.ckptEvery {
		return j.checkpoint()
	}
	return nil
}

// checkSpace fails the pull when the disk is down to MinFree, for pulls
// whose size was not known up front.
func (j *job) checkSpace() error {
	if j.c.cfg.MinFree == 0 {
		return nil
	}
	free, err := freeBytes(j.c.ingestDir)
	if err != nil {
		return permanent(err)
	}
	if free < j.c.cfg.MinFree {
		return permanentf("not enough disk space: %d bytes available, keeping %d free", free, j.c.cfg.MinFree)
	}
	return nil
}
