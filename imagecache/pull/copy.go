package pull

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

// write appends p to the data and the hash and checkpoints every
// CheckpointBytes, once the cache and the catalog's size allow it.
func (j *job) write(p []byte) error {
	size := j.off + int64(len(p))
	if j.req.Size > 0 && size > j.req.Size {
		return permanentf("image is larger than the %d bytes the catalog gives it", j.req.Size)
	}
	if err := j.req.Space.Check(size); err != nil {
		return permanent(err)
	}
	if _, err := j.part.Write(p); err != nil {
		return permanent(fmt.Errorf("write ingest file: %w", err))
	}
	j.h.Write(p)
	j.off = size
	j.req.Progress.Done.Store(j.off)
	j.p.cfg.Bytes.Add(float64(len(p)))
	if j.req.Compression == "" && j.off-j.synced >= j.ckptEvery {
		return j.checkpoint()
	}
	return nil
}
