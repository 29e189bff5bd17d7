package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/siteboot/siteboot/internal/redact"
)

// maxZstdWindow bounds the memory a zstd stream may demand (zstd --long=28).
const maxZstdWindow = 256 << 20

// attemptDecompress is one attempt of a decompress-on-pull: the origin's
// compressed bytes are hashed (for SourceSHA256) as they arrive, decoded
// (zstd frame checksums and gzip CRC-32 checked by the decoders), and the
// decoded image written and hashed like a plain pull. A decoder's state
// cannot be checkpointed, so every attempt, and a pull after a restart,
// starts from byte 0.
func (j *job) attemptDecompress(ctx context.Context) error {
	if err := j.reset(); err != nil {
		return err
	}
	resp, body, done, err := j.get(ctx)
	if err != nil {
		return err
	}
	defer done()
	if resp.StatusCode != 200 {
		if err := statusError(resp); err != nil {
			return err
		}
		return fmt.Errorf("origin answered %s to a request without Range", redact.Clip(resp.Status))
	}
	if err := j.admit(); err != nil { // the decoded size is the catalog's, if it gives one
		return err
	}
	src := sha256.New()
	in := &readErr{r: body}
	tee := io.TeeReader(in, src)
	dec, closeDec, err := newDecoder(j.req.Compression, tee)
	if err != nil {
		return in.blame(err, j.req.Compression)
	}
	defer closeDec()
	if err := j.copyFrom(dec); err != nil {
		return in.blame(err, j.req.Compression)
	}
	if n, _ := io.Copy(io.Discard, io.LimitReader(tee, 1<<20)); n > 0 {
		return permanentf("%d bytes of trailing data after the %s stream", n, j.req.Compression)
	}
	if s := j.req.SourceSHA256; len(s) > 0 && !bytes.Equal(src.Sum(nil), s) {
		return permanent(fmt.Errorf("%w: compressed bytes have sha256 %x, want %x", errDigest, src.Sum(nil), s))
	}
	return nil
}

func newDecoder(kind string, r io.Reader) (io.Reader, func(), error) {
	switch kind {
	case Zstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	case Gzip:
		g, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return g, func() { g.Close() }, nil
	}
	return nil, nil, permanentf("unknown compression %q", kind)
}

// readErr remembers the origin's read failure, so that a decoder error
// caused by the network is retried and one caused by the data is not.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

func (r *readErr) blame(err error, kind string) error {
	switch {
	case isPermanent(err):
		return err
	case r.err != nil:
		return fmt.Errorf("read origin: %w", r.err)
	}
	return permanent(fmt.Errorf("corrupt %s stream: %w", kind, err))
}
