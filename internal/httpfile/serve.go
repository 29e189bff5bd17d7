package httpfile

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Serve answers a GET or HEAD (the caller refuses other methods) for f,
// size bytes with the strong entity tag etag ("\"…\""): 304 or 412 for the
// conditional headers, 416 for an unsatisfiable range, else 200 or 206
// with the bytes. It sets ETag, Accept-Ranges, Content-Type
// (application/octet-stream unless the caller set one), Content-Length
// and Content-Range; other headers (Cache-Control, say) are the caller's,
// set before. The body goes to w's ReadFrom as an *io.LimitedReader over
// f, which net/http passes to the connection: an *os.File is sent with
// sendfile. It returns the status, the body bytes sent, and the error that
// cut the body short, if one did.
func Serve(w http.ResponseWriter, r *http.Request, f io.ReadSeeker, size int64, etag string) (int, int64, error) {
	hd := w.Header()
	hd.Set("ETag", etag)
	hd.Set("Accept-Ranges", "bytes")
	code, rng := CondsOf(r.Header).Answer(r.Method == http.MethodGet, etag, size)
	switch code {
	case http.StatusPreconditionFailed, http.StatusNotModified:
		w.WriteHeader(code)
		return code, 0, nil
	case http.StatusRequestedRangeNotSatisfiable:
		hd.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		hd.Set("Content-Length", "0")
		w.WriteHeader(code)
		return code, 0, nil
	case http.StatusPartialContent:
		hd.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rng.Start, rng.Start+rng.Length-1, size))
	}
	if hd.Get("Content-Type") == "" {
		hd.Set("Content-Type", "application/octet-stream")
	}
	hd.Set("Content-Length", strconv.FormatInt(rng.Length, 10))
	w.WriteHeader(code)
	if r.Method == http.MethodHead || rng.Length == 0 {
		return code, 0, nil
	}
	if _, err := f.Seek(rng.Start, io.SeekStart); err != nil {
		return code, 0, fmt.Errorf("seek: %w", err)
	}
	// With the head out, net/http hands the whole range to the
	// connection's ReadFrom; otherwise it first copies 512 bytes through
	// user space to sniff a Content-Type.
	_ = http.NewResponseController(w).Flush()
	n, err := io.CopyN(w, f, rng.Length)
	return code, n, err
}
