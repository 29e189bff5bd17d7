package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// httpSpec is how a machine's iPXE talks HTTP.
type httpSpec struct {
	RcvBuf      int           // SO_RCVBUF before connect (iPXE's fixed window); 0: autotune
	IdleTimeout time.Duration // no byte for this long fails the request
	MaxScript   int64         // largest script read
}

// newMachineClient is one machine's HTTP client: its own keep-alive
// connection (iPXE fetches one file at a time and reuses it), from its own
// source address, with the receive buffer set before connect so that the
// window it advertises is the one iPXE would.
func newMachineClient(src netip.Addr, s httpSpec) *http.Client {
	d := &net.Dialer{Timeout: s.IdleTimeout}
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	if s.RcvBuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, s.RcvBuf)
			})
			return errors.Join(err, serr)
		}
	}
	idle := s.IdleTimeout
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: idle}, nil
		},
		MaxIdleConnsPerHost:   1,
		MaxConnsPerHost:       1,
		DisableCompression:    true,
		ResponseHeaderTimeout: idle,
		IdleConnTimeout:       time.Minute,
	}
	return &http.Client{Transport: t}
}

// idleConn fails a read or write that makes no progress for idle, the way
// a stalled connection makes iPXE give up; a slow but moving transfer
// goes on.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(b)
}

// statusError is an answer other than 200.
type statusError struct {
	Code   int
	Status string
}

func (e *statusError) Error() string { return "status " + e.Status }

// errHTTPSize, errDigest and errNoLength classify failed downloads.
var (
	errHTTPSize = errors.New("size mismatch")
	errDigest   = errors.New("sha256 mismatch")
	errNoLength = errors.New("no Content-Length")
)

// getScript fetches a script (at most max bytes).
func getScript(ctx context.Context, c *http.Client, url string, max int64) (string, error) {
	resp, err := get(ctx, c, url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return "", fmt.Errorf("GET %s: body: %w", url, err)
	}
	if int64(len(body)) > max {
		return "", fmt.Errorf("GET %s: script longer than %d bytes", url, max)
	}
	return string(body), nil
}

// download fetches a file into nothing, checking its length against
// Content-Length and, when wantSHA is set, its digest.
func download(ctx context.Context, c *http.Client, url, wantSHA string, buf []byte) (int64, error) {
	resp, err := get(ctx, c, url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("GET %s: %w", url, errNoLength)
	}
	var h hash.Hash
	var w io.Writer = io.Discard
	if wantSHA != "" {
		h = sha256.New()
		w = h
	}
	n, err := io.CopyBuffer(w, onlyReader{resp.Body}, buf)
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d of %d bytes: %w", url, n, resp.ContentLength, err)
	}
	if n != resp.ContentLength {
		return n, fmt.Errorf("GET %s: %w: %d bytes, Content-Length %d", url, errHTTPSize, n, resp.ContentLength)
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA {
			return n, fmt.Errorf("GET %s: %w: %s, want %s", url, errDigest, got, wantSHA)
		}
	}
	return n, nil
}

// onlyReader hides WriterTo, so CopyBuffer reads through buf.
type onlyReader struct{ io.Reader }

func get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	// iPXE's User-Agent; servers may tell it from other clients.
	req.Header.Set("User-Agent", "iPXE/1.21.1 (storm)")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %w", url, &statusError{Code: resp.StatusCode, Status: resp.Status})
	}
	return resp, nil
}
