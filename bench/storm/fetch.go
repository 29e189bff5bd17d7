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
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// httpSpec is how a machine's iPXE talks HTTP.
type httpSpec struct {
	RcvBuf      int           // SO_RCVBUF before connect (iPXE's fixed window); 0: autotune
	CopyBodies  bool          // read kernel and initrd bytes into memory, not discarded in the kernel
	IdleTimeout time.Duration // no byte for this long fails the request
	MaxScript   int64         // largest script read
}

// newMachineClient is one machine's HTTP client: its own keep-alive
// connection (iPXE fetches one file at a time and reuses it), from its own
// source address, with the receive buffer set before connect so that the
// window it advertises is the one iPXE would.
//
// Reads into sink (the buffer download copies bodies through) are body
// bytes nobody looks at: unless s.CopyBodies, the kernel drops them from
// the socket without copying them out (see idleConn.Read).
func newMachineClient(src netip.Addr, s httpSpec, sink []byte) *http.Client {
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
			ic := &idleConn{Conn: c, idle: idle}
			if !s.CopyBodies && len(sink) > 0 {
				if sc, ok := c.(syscall.Conn); ok {
					if raw, err := sc.SyscallConn(); err == nil {
						ic.raw, ic.sink = raw, sink
					}
				}
			}
			return ic, nil
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
	raw  syscall.RawConn // set with sink
	sink []byte
}

// Read reads b's worth, or, when b is the sink, drops up to len(b) bytes
// in the kernel (recv with MSG_TRUNC: a TCP socket then frees the data
// without copying it out). The copy costs the client CPU on the same cores
// as the server under test, where a real machine receives on a CPU of its
// own: a fifth of the generator's CPU in a 500-machine storm.
//
// Only a body read reaches here with the sink: net/http's buffered reader
// reads straight into the caller's buffer when it is empty and the
// caller's buffer is at least its own size, and the body's limit reader
// never asks for more than what is left of the body. Header reads and the
// transport's look-ahead go through the reader's own buffer, so nothing
// but body bytes is dropped.
func (c *idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	if c.sink != nil && len(b) > 0 && &b[0] == &c.sink[0] {
		return c.drop(b)
	}
	return c.Conn.Read(b)
}

func (c *idleConn) drop(b []byte) (int, error) {
	var n int
	var serr error
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, _, serr = unix.Recvfrom(int(fd), b, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvfrom", serr)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
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
	n, err := io.CopyBuffer(onlyWriter{w}, onlyReader{resp.Body}, buf)
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

// onlyReader hides WriterTo and onlyWriter hides ReaderFrom (io.Discard
// has one, reading through a small buffer of its own), so CopyBuffer reads
// through buf.
type (
	onlyReader struct{ io.Reader }
	onlyWriter struct{ io.Writer }
)

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
