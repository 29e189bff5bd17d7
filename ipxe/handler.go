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
	remote := remoteAddr(r)
	log := s.log.With("path", r.URL.Path, "remote", addrString(remote))
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
		s.fail(w, log, remote, status, kind, msg, err)
		return
	}
	s.scripts.WithLabelValues(kindBootstrap).Inc()
	level, held := s.logLevel(remote, stageBootstrap, slog.LevelInfo)
	log.Log(context.Background(), level, "ipxe: bootstrap served", "result", kindBootstrap, held)
	writeScript(w, bootstrapScript(base, s.cfg.Retry))
}

func (s *Server) serveScript(w http.ResponseWriter, r *http.Request) {
	remote := remoteAddr(r)
	log := s.log.With("path", r.URL.Path, "remote", addrString(remote))
	base, err := s.baseURL(r)
	var req *sitev1.IpxeScriptRequest
	if err == nil {
		req, err = parseQuery(r.URL.RawQuery)
	}
	var out outcome
	if err == nil {
		req.Ip = addrString(remote)
		out, err = s.render(r.Context(), req, base, forMachine)
	}
	log = requestLog(log, req, out)
	status, kind, msg := classify(err)
	var unknown *UnknownMachineError
	switch {
	case errors.As(err, &unknown):
		s.serveUnknown(w, log, remote, out, unknown)
	case err != nil:
		s.fail(w, log, remote, status, kind, msg, err)
	default:
		s.scripts.WithLabelValues(out.kind).Inc()
		level, held := s.logLevel(remote, stageScript, slog.LevelInfo)
		log.Log(context.Background(), level, "ipxe: script served", "result", out.kind, held)
		writeScript(w, out.script.GetScript())
	}
}

// serveUnknown answers a machine without a live entry, or one whose UUID
// the entry's pin refuses, with the script that says so. A MAC the
// discovery ledger holds from DHCP gets its last_seen moved; nothing else
// is recorded: HTTP is not the provisioning path.
func (s *Server) serveUnknown(w http.ResponseWriter, log *slog.Logger, remote netip.Addr, out outcome, u *UnknownMachineError) {
	s.scripts.WithLabelValues(out.kind).Inc()
	if u.Reason == "" {
		seen := s.cfg.Discovery != nil && s.cfg.Discovery.Touch(u.MAC, s.cfg.Now())
		s.unknown.WithLabelValues(strconv.FormatBool(seen)).Inc()
		level, held := s.logLevel(remote, stageUnknown, slog.LevelInfo)
		log.Log(context.Background(), level, "ipxe: no live entry; told the machine so", "result", out.kind,
			"seen_on_dhcp", seen, held)
	} else {
		level, held := s.logLevel(remote, stageUnknown, slog.LevelWarn)
		log.Log(context.Background(), level, "ipxe: the entry's product_uuid pin refused the request; told the machine it is unknown",
			"result", out.kind, "reason", u.Reason, held)
	}
	writeScript(w, u.Script.GetScript())
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

func (s *Server) fail(w http.ResponseWriter, log *slog.Logger, remote netip.Addr, status int, kind, msg string, err error) {
	s.scripts.WithLabelValues(kind).Inc()
	// Every refusal is a line the client can repeat at will (a fenced
	// appliance and a broken entry too), so all are limited per remote
	// address.
	level := slog.LevelInfo
	if status >= 500 && status != http.StatusServiceUnavailable {
		level = slog.LevelError
	}
	level, held := s.logLevel(remote, stageRefused, level)
	log.Log(context.Background(), level, "ipxe: request refused", "result", kind, "status", status, "err", causeOf(err), held)
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

func writeScript(w http.ResponseWriter, script string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(script)))
	io.WriteString(w, script)
}

// remoteAddr is the client's address as the connection shows it; the zero
// Addr when it cannot be read.
func remoteAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap().WithZone("")
}

// addrString is a in its usual form, "" for the zero Addr.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
