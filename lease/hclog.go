package lease

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets raft log through the appliance's slog logger, so its
// lines look like every other line. Raft's Info is noisy; it is logged at
// Debug, and only Warn and Error pass at the default level.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHclog(l *slog.Logger) hclog.Logger { return &hclogAdapter{l: l, name: "raft"} }

func (h *hclogAdapter) slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug, hclog.Info:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lv := h.slogLevel(level)
	if lv == slog.LevelWarn && strings.HasPrefix(msg, "heartbeat timeout reached") {
		// Every start of a node begins so: an election is routine, not a
		// warning. Losing leadership is logged by the lease as a warning.
		lv = slog.LevelInfo
	}
	h.l.Log(context.Background(), lv, h.name+": "+msg, append(h.args, args...)...)
}
func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *hclogAdapter) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), h.slogLevel(level))
}
func (h *hclogAdapter) IsTrace() bool        { return h.enabled(hclog.Trace) }
func (h *hclogAdapter) IsDebug() bool        { return h.enabled(hclog.Debug) }
func (h *hclogAdapter) IsInfo() bool         { return h.enabled(hclog.Info) }
func (h *hclogAdapter) IsWarn() bool         { return h.enabled(hclog.Warn) }
func (h *hclogAdapter) IsError() bool        { return h.enabled(hclog.Error) }
func (h *hclogAdapter) ImpliedArgs() []any   { return h.args }
func (h *hclogAdapter) Name() string         { return h.name }
func (h *hclogAdapter) SetLevel(hclog.Level) {}
func (h *hclogAdapter) GetLevel() hclog.Level {
	if h.IsDebug() {
		return hclog.Debug
	}
	return hclog.Warn
}
func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: h.l, name: h.name, args: append(append([]any{}, h.args...), args...)}
}
func (h *hclogAdapter) Named(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: h.name + "." + name, args: h.args}
}
func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: name, args: h.args}
}
func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelWarn)
}
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(nil).Writer()
}
