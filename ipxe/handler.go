package ipxe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// Handler serves GET (and HEAD) /boot.ipxe and /ipxe.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", s.serveBootstrap)
	mux.HandleFunc("GET /ipxe", s.serveScript)
	return mux
}

func (s *Server) serveBootstrap(w http.ResponseWriter, r *http.Request) {
	log := s.log.With("path", r.URL.Path, "remote", remoteIP(r))
	base, err := s.baseURL(r)
	if err == nil {
		if epoch, open := s.cfg.Gate.Gate(); !open {
			err = ErrFenced
		} else {
			log = log.With("epoch", epoch)
		}
	}
	status, kind, msg := classify(err)
	if err != nil {
		s.fail(w, log, status, kind, msg, err)
		return
	}
	s.scripts.WithLabelValues(kindBootstrap).Inc()
	log.Info("ipxe: bootstrap served", "result", kindBootstrap)
	writeScript(w, bootstrapScript(base, s.cfg.Retry))
}

func (s *Server) serveScript(w http.ResponseWriter, r *http.Request) {
	remote := remoteIP(r)
	log := s.log.With("path", r.URL.Path, "remote", remote)
	base, err := s.baseURL(r)
	var req *sitev1.IpxeScriptRequest
	if err == nil {
		req, err = parseQuery(r.URL.RawQuery)
	}
	var out outcome
	if err == nil {
		req.Ip = remote
		out, err = s.render(r.Context(), req, base)
	}
	log = requestLog(log, req, out)
	status, kind, msg := classify(err)
	var unknown *UnknownMachineError
	switch {
	case errors.As(err, &unknown):
		s.recordUnknown(out.req)
		s.scripts.WithLabelValues(kindUnknown).Inc()
		log.Info("ipxe: no live entry; told the machine so and recorded it", "result", kindUnknown)
		writeScript(w, unknown.Script.GetScript())
	case err != nil:
		s.fail(w, log, status, kind, msg, err)
	default:
		s.scripts.WithLabelValues(out.kind).Inc()
		log.Info("ipxe: script served", "result", out.kind)
		writeScript(w, out.script.GetScript())
	}
}

// requestLog adds the request fields once: the normalised values when the
// request was valid, else the raw ones (slog quotes them).
func requestLog(log *slog.Logger, raw *sitev1.IpxeScriptRequest, out outcome) *slog.Logger {
	req := out.req
	if req == nil {
		req = raw
	}
	if req == nil {
		return log
	}
	return log.With("mac", clip(req.GetMac()), "uuid", clip(req.GetUuid()),
		"buildarch", clip(req.GetBuildarch()), "platform", clip(req.GetPlatform()), "epoch", out.epoch)
}

// clip bounds what a log line repeats of a refused value.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (s *Server) fail(w http.ResponseWriter, log *slog.Logger, status int, kind, msg string, err error) {
	s.scripts.WithLabelValues(kind).Inc()
	level := slog.LevelInfo
	if status >= 500 && status != http.StatusServiceUnavailable {
		level = slog.LevelError
	}
	log.Log(context.Background(), level, "ipxe: request refused", "result", kind, "status", status, "err", causeOf(err))
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(s.cfg.Retry), 10))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// causeOf is what the log line says about err: for a secret, the resolver's
// error (which names the ref, never the value).
func causeOf(err error) string {
	var se *SecretError
	if errors.As(err, &se) && se.Err != nil {
		return se.Error() + ": " + se.Err.Error()
	}
	return err.Error()
}

func (s *Server) recordUnknown(req *sitev1.IpxeScriptRequest) {
	if s.cfg.Discovery == nil || req == nil {
		return
	}
	sight := discovery.Sighting{
		MAC:         req.GetMac(),
		ProductUUID: req.GetUuid(),
		Arch:        archName(req.GetBuildarch(), req.GetPlatform()),
		At:          s.cfg.Now(),
	}
	s.cfg.Discovery.Record(sight)
}

func writeScript(w http.ResponseWriter, script string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(script)))
	io.WriteString(w, script)
}

// baseURL is Config.BaseURL, or http(s)://<Host> checked like any URL.
func (s *Server) baseURL(r *http.Request) (string, error) {
	if s.base != "" {
		return s.base, nil
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	for i := 0; i < len(r.Host); i++ {
		c := r.Host[i]
		if !(c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return "", &RequestError{Field: "host", Reason: "the Host header is not a host[:port]"}
		}
	}
	base, err := checkBaseURL(scheme + r.Host)
	if err != nil {
		return "", &RequestError{Field: "host", Reason: "the Host header is not a host[:port]"}
	}
	return base, nil
}

// remoteIP is the client's address as the connection shows it.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	return ip.Unmap().WithZone("").String()
}
