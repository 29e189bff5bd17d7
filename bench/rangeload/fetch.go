package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
)

// probe asks for the size of the file at url with HEAD; the server must
// say 200, give a positive Content-Length and accept byte ranges.
func probe(ctx context.Context, client *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return 0, fmt.Errorf("head %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("head %s: %w", url, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("head %s: %s", url, resp.Status)
	case resp.ContentLength <= 0:
		return 0, fmt.Errorf("head %s: no Content-Length", url)
	case resp.Header.Get("Accept-Ranges") != "bytes":
		return 0, fmt.Errorf("head %s: Accept-Ranges %q, want bytes", url, resp.Header.Get("Accept-Ranges"))
	}
	return resp.ContentLength, nil
}

// fetcher reads ranges of one URL into its buffer; one per client.
type fetcher struct {
	client *http.Client
	url    string
	size   int64
	buf    []byte // the last body read, len = range size
}

// get fetches [off, off+len(f.buf)) and checks the answer's status,
// headers and length. The body is left in f.buf.
func (f *fetcher) get(ctx context.Context, off int64) error {
	n := int64(len(f.buf))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkHeaders(resp, contentRange{off, off + n - 1, f.size}); err != nil {
		return err
	}
	if _, err := io.ReadFull(resp.Body, f.buf); err != nil {
		return fmt.Errorf("range at %d: body: %w", off, err)
	}
	var one [1]byte
	if m, _ := resp.Body.Read(one[:]); m > 0 {
		return fmt.Errorf("range at %d: body longer than %d bytes", off, n)
	}
	return nil
}

// checkHeaders checks a 206 against the range asked for.
func checkHeaders(resp *http.Response, want contentRange) error {
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("range at %d: %s, want 206", want.First, resp.Status)
	}
	got, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil {
		return fmt.Errorf("range at %d: %w", want.First, err)
	}
	if got != want {
		return fmt.Errorf("range at %d: Content-Range %+v, want %+v", want.First, got, want)
	}
	if n := want.Last - want.First + 1; resp.ContentLength != n {
		return fmt.Errorf("range at %d: Content-Length %d, want %d", want.First, resp.ContentLength, n)
	}
	return nil
}

// verifier compares answers with the local copy of the file.
type verifier struct {
	file *os.File
	buf  []byte
}

// check compares body with the file's bytes at off.
func (v *verifier) check(off int64, body []byte) error {
	want := v.buf[:len(body)]
	if _, err := v.file.ReadAt(want, off); err != nil {
		return fmt.Errorf("verify: read %s at %d: %w", v.file.Name(), off, err)
	}
	if !bytes.Equal(body, want) {
		i := 0
		for i < len(body) && body[i] == want[i] {
			i++
		}
		return fmt.Errorf("range at %d: body differs from %s at byte %d", off, v.file.Name(), off+int64(i))
	}
	return nil
}
