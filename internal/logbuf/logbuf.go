// Package logbuf is the log sink tests hand a slog handler: a buffer that
// goroutines may write to at once and a test reads back as text or lines.
// It holds no secret-handling of its own; tests use it to prove that a
// secret never reached a log.
package logbuf

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Buffer collects log output. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is the number of bytes written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Lines returns the lines written so far that contain every one of subs
// (all lines when subs is empty).
func (b *Buffer) Lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if line != "" && containsAll(line, subs) {
			out = append(out, line)
		}
	}
	return out
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Logger is a text logger at debug level writing to b.
func (b *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
