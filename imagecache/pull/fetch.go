package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/siteboot/siteboot/internal/redact"
)

// attempt is one HTTP request of a plain pull: from byte 0, or resumed
// from j.off with Range and If-Range.
func (j *job) attempt(ctx context.Context) error {
	if j.req.Compression != "" {
		return j.attemptDecompress(ctx)
	}
	if j.off > 0 && j.off == j.total {
		// Resumed from a checkpoint of the whole image (a stop between the
		// last write and the seal): nothing is left to ask for, and a range
		// from the end would get 416 and start the pull over. The digest
		// decides, as for any pull.
		j.log.Info("imagecache: the checkpoint covers the whole image, no request")
		return j.admit() // the capacity and the reserve apply as to any pull
	}
	resp, body, done, err := j.get(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := j.accept(resp); err != nil {
		return err
	}
	if err := j.admit(); err != nil {
		return err
	}
	if err := j.copyFrom(body); err != nil {
		return err
	}
	if j.total >= 0 && j.off < j.total {
		return fmt.Errorf("origin closed after %d of %d bytes", j.off, j.total)
	}
	return nil
}

// get sends the request for the current offset. The body it returns aborts
// when nothing arrives for StallTimeout; done releases the request.
func (j *job) get(ctx context.Context) (*http.Response, io.Reader, func(), error) {
	actx, cancel := context.WithCancelCause(ctx)
	timeout := j.p.cfg.StallTimeout
	stall := time.AfterFunc(timeout, func() { cancel(errStalled) })
	req, err := http.NewRequestWithContext(actx, http.MethodGet, j.req.URL, nil)
	if err != nil {
		stall.Stop()
		cancel(nil)
		return nil, nil, nil, permanent(fmt.Errorf("request %s: %w", redact.URL(j.req.URL), redact.URLError(err)))
	}
	req.Header.Set("Accept-Encoding", "identity")
	if j.off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", j.off))
		if v := j.validator(); v != "" {
			req.Header.Set("If-Range", v)
		}
	}
	resp, err := j.p.cfg.Client.Do(req)
	if err != nil {
		stall.Stop()
		cancel(nil)
		return nil, nil, nil, fmt.Errorf("get %s: %w", redact.URL(j.req.URL), clipped(causeOr(actx, redact.URLError(err))))
	}
	body := &stallReader{r: resp.Body, t: stall, d: timeout, ctx: actx}
	done := func() {
		stall.Stop()
		cancel(nil)
		resp.Body.Close()
	}
	return resp, body, done, nil
}

// maxErrText bounds the text of a transport error, which quotes what the
// origin sent (a malformed status line or header, up to the transport's
// limit of megabytes) and goes into logs, the failure reason and the index.
const maxErrText = 512

// clipped is err, or an error with its text cut to maxErrText when longer.
func clipped(err error) error {
	if s := err.Error(); len(s) > maxErrText {
		return errors.New(s[:maxErrText] + "…")
	}
	return err
}

// validator is what If-Range carries: the strong ETag, else Last-Modified.
func (j *job) validator() string {
	if j.etag != "" {
		return j.etag
	}
	return j.lastMod
}

type stallReader struct {
	r   io.Reader
	t   *time.Timer
	d   time.Duration
	ctx context.Context
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.t.Reset(s.d)
	if err != nil && err != io.EOF {
		err = causeOr(s.ctx, err)
	}
	return n, err
}

// causeOr names the stall when it is why err happened.
func causeOr(ctx context.Context, err error) error {
	if context.Cause(ctx) == errStalled {
		return fmt.Errorf("%w: nothing received for the stall timeout", errStalled)
	}
	return err
}

// statusError sorts an origin's status: nil for 200 and 206, retryable for
// 408, 429 and 5xx, permanent otherwise.
func statusError(resp *http.Response) error {
	switch code := resp.StatusCode; {
	case code == http.StatusOK || code == http.StatusPartialContent:
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return fmt.Errorf("origin answered %s", redact.Clip(resp.Status))
	}
	return permanentf("origin answered %s", redact.Clip(resp.Status))
}

// accept checks the origin's answer against the pull's state: a whole
// image restarts the pull, a resumed range must continue exactly where the
// data ends, with the same size and ETag.
func (j *job) accept(resp *http.Response) error {
	switch {
	case resp.StatusCode == http.StatusOK:
		if j.off > 0 {
			j.log.Info("imagecache: origin sent the whole image, starting over")
			if err := j.reset(); err != nil {
				return err
			}
		}
		j.total = resp.ContentLength
		j.etag, j.lastMod = strongETag(resp.Header.Get("ETag")), resp.Header.Get("Last-Modified")
	case resp.StatusCode == http.StatusPartialContent && j.off > 0:
		if why := j.changed(resp); why != "" {
			if err := j.reset(); err != nil {
				return err
			}
			return fmt.Errorf("origin changed (%s), starting over", why)
		}
	case resp.StatusCode == http.StatusPartialContent || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && j.off > 0:
		if err := j.reset(); err != nil {
			return err
		}
		return fmt.Errorf("origin answered %s to a request from byte %d, starting over", redact.Clip(resp.Status), j.off)
	default:
		if err := statusError(resp); err != nil {
			return err
		}
	}
	if j.req.Size > 0 && j.total >= 0 && j.total != j.req.Size {
		return permanentf("origin announces %d bytes, the catalog %d", j.total, j.req.Size)
	}
	j.req.Progress.Total.Store(j.total)
	return nil
}

// admit asks the cache for room once the size is known: the origin's, or
// else the catalog's.
func (j *job) admit() error {
	total := j.total
	if total < 0 {
		total = j.req.Size
	}
	if total <= 0 {
		return nil
	}
	return permanent(j.req.Space.Admit(total, j.off))
}

// changed says why a 206 cannot continue the data on disk, or "".
func (j *job) changed(resp *http.Response) string {
	cr := resp.Header.Get("Content-Range")
	first, _, size, ok := parseContentRange(cr)
	etag := strongETag(resp.Header.Get("ETag"))
	switch {
	case !ok:
		return fmt.Sprintf("unusable Content-Range %q", redact.Clip(cr))
	case first != j.off:
		return fmt.Sprintf("range starts at byte %d, not %d", first, j.off)
	case j.total >= 0 && size != j.total:
		return fmt.Sprintf("size changed from %d to %d bytes", j.total, size)
	case j.etag != "" && etag != j.etag:
		return fmt.Sprintf("ETag changed from %s to %s", redact.Clip(j.etag), redact.Clip(etag))
	}
	j.total, j.resumed = size, true
	return ""
}
