package tftpd

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pin/tftp/v3"
)

// What clients are told. pin/tftp sends every refusal as ERROR code 1
// ("File not found"), so the message says what happened.
var (
	errNotFound   = errors.New("file not found")
	errAccess     = errors.New("access violation")
	errWrite      = errors.New("access violation: this server is read-only")
	errStopping   = errors.New("server shutting down")
	errReadSource = errors.New("reading the boot file failed")
)

// transfer is one request while its handler runs.
type transfer struct {
	key   string    // remote "ip:port", the key in Server.active
	start time.Time // when the handler was called
	stats atomic.Pointer[tftp.TransferStats]
	log   *slog.Logger
}

func (s *Server) readHandler(done <-chan struct{}) func(string, io.ReaderFrom) error {
	return func(raw string, rf io.ReaderFrom) error { return s.read(done, raw, rf) }
}

// read serves one read request. Refusals return the error pin/tftp sends
// to the client; a started transfer is logged here and returns nil (the
// library has already sent any ERROR).
func (s *Server) read(done <-chan struct{}, raw string, rf io.ReaderFrom) error {
	t := s.begin(raw, rf)
	defer s.active.CompareAndDelete(t.key, t)
	name, err := requestName(raw)
	if err != nil {
		return s.refuse(t, resultRefused, err, errAccess)
	}
	f, size, err := s.cfg.Files.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return s.refuse(t, resultNotFound, err, errNotFound)
	}
	if err != nil {
		return s.refuse(t, resultRefused, err, errAccess)
	}
	defer f.Close()
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		ot.SetSize(size) // answers tsize without a Seek
	}
	src := &stopReader{done: done, r: f}
	n, err := rf.ReadFrom(src)
	s.finish(t, n, size, err, src.cause)
	return nil
}

// writeHandler refuses every write request.
func (s *Server) writeHandler(raw string, wt io.WriterTo) error {
	addr := ""
	if it, ok := wt.(tftp.IncomingTransfer); ok {
		a := it.RemoteAddr()
		addr = a.String()
	}
	s.m.transfers.WithLabelValues(resultRefused).Inc()
	s.log.Info("tftp transfer", "remote", addr, "file", raw, "op", "write", "result", resultRefused)
	return errWrite
}

func (s *Server) begin(raw string, rf io.ReaderFrom) *transfer {
	t := &transfer{start: time.Now()}
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		a := ot.RemoteAddr()
		t.key = addrKey(a.IP, a.Port)
	}
	t.log = s.log.With("remote", t.key, "file", raw)
	s.active.Store(t.key, t)
	return t
}

func (s *Server) refuse(t *transfer, result string, err, tell error) error {
	s.m.transfers.WithLabelValues(result).Inc()
	t.log.Info("tftp transfer", "op", "read", "result", result, "err", err)
	return tell
}

// finish logs and counts a transfer that was started.
func (s *Server) finish(t *transfer, n, size int64, err, cause error) {
	d := time.Since(t.start)
	result := classify(err)
	s.m.transfers.WithLabelValues(result).Inc()
	s.m.bytes.Add(float64(n))
	if result == resultOK {
		s.m.seconds.Observe(d.Seconds())
	}
	st := t.stats.Load()
	attrs := []any{"op", "read", "bytes", n, "size", size, "blksize", blockSize(st),
		"duration", d.Round(time.Microsecond), "result", result}
	if st != nil {
		attrs = append(attrs, "mode", st.Mode, "datagrams", st.DatagramsSent, "acked", st.DatagramsAcked)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if cause != nil {
		attrs = append(attrs, "cause", cause)
	}
	level := slog.LevelInfo
	if result == resultTimeout || result == resultError {
		level = slog.LevelWarn
	}
	t.log.Log(context.Background(), level, "tftp transfer", attrs...)
}

// classify maps the error of a started transfer to its result label.
func classify(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, errStopping), errors.Is(err, errReadSource):
		return resultError
	case errors.As(err, &ne) && ne.Timeout():
		return resultTimeout
	}
	return resultAborted
}

// blockSize is the negotiated blksize: the OACK value, or RFC 1350's 512.
func blockSize(st *tftp.TransferStats) int {
	if st != nil {
		if n, err := strconv.Atoi(st.Opts["blksize"]); err == nil {
			return n
		}
	}
	return 512
}

func addrKey(ip net.IP, port int) string { return net.JoinHostPort(ip.String(), strconv.Itoa(port)) }

// stopReader reads the file until done is closed. A read error reaches
// the client as errReadSource (pin/tftp sends the error text); the cause,
// which may name a path, is kept for the log.
type stopReader struct {
	done  <-chan struct{}
	r     io.Reader
	cause error
}

func (sr *stopReader) Read(p []byte) (int, error) {
	select {
	case <-sr.done:
		return 0, errStopping
	default:
	}
	n, err := sr.r.Read(p)
	if err != nil && err != io.EOF {
		sr.cause = err
		return n, errReadSource
	}
	return n, err
}

// hook receives pin/tftp's per-transfer statistics and request errors.
type hook struct{ s *Server }

// OnSuccess hands the statistics to the running handler.
func (h hook) OnSuccess(st tftp.TransferStats) { h.record(st) }

// OnFailure hands the statistics to the running handler; a failure
// without a file name is a packet the listener could not use.
func (h hook) OnFailure(st tftp.TransferStats, err error) {
	if st.Filename != "" {
		h.record(st)
		return
	}
	var op *net.OpError
	if errors.As(err, &op) {
		h.s.log.Warn("tftp request not served", "err", err)
		return
	}
	h.s.log.Debug("tftp packet ignored", "err", err)
}

// record runs in the handler's goroutine (inside ReadFrom), so the
// handler reads t.stats after ReadFrom without further locking.
func (h hook) record(st tftp.TransferStats) {
	if v, ok := h.s.active.Load(addrKey(st.RemoteAddr, st.Tid)); ok {
		v.(*transfer).stats.Store(&st)
	}
}
