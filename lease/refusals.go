package lease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Why an inbound raft connection was refused: the reason label of
// siteboot_raft_peers_refused_total.
const (
	reasonNotTLS           = "not_tls"           // the first bytes are not a TLS handshake (plain raft, a scanner)
	reasonNoCertificate    = "no_certificate"    // TLS without a client certificate
	reasonUnknownAuthority = "unknown_authority" // a certificate not issued by the site CA
	reasonBadCertificate   = "bad_certificate"   // a site certificate that is expired, not for client auth, …
	reasonTimeout          = "handshake_timeout" // no complete handshake within the deadline
	reasonHandshake        = "handshake_failed"  // any other TLS failure (old version, peer gave up, …)
	reasonConnLimit        = "conn_limit"        // maxPeerConns connections already open
	reasonHandshakeLimit   = "handshake_limit"   // maxHandshakes handshakes already under way
)

var refusalReasons = []string{reasonNotTLS, reasonNoCertificate, reasonUnknownAuthority, reasonBadCertificate,
	reasonTimeout, reasonHandshake, reasonConnLimit, reasonHandshakeLimit}

// classify names the reason a handshake failed.
func classify(err error) string {
	var rh tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	var inv x509.CertificateInvalidError
	var ne net.Error
	switch {
	case errors.As(err, &rh):
		return reasonNotTLS
	case errors.Is(err, errNoPeerCert):
		return reasonNoCertificate
	case errors.As(err, &ua):
		return reasonUnknownAuthority
	case errors.As(err, &inv):
		return reasonBadCertificate
	case errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout
	}
	return reasonHandshake
}

// refusalLogEvery is how often each reason may log a line; refusals in
// between are counted into the next line's suppressed field.
const refusalLogEvery = 10 * time.Second

// refusals counts every refused peer and logs them, at most one line per
// reason per refusalLogEvery, so a flood of connections cannot flood the
// log.
type refusals struct {
	log     *slog.Logger
	now     func() time.Time
	counter *prometheus.CounterVec

	lines *ratelimit.Keyed[string]
}

func newRefusals(log *slog.Logger, now func() time.Time) *refusals {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "siteboot", Subsystem: "raft", Name: "peers_refused_total",
		Help: "Inbound raft connections refused before raft saw a byte, by reason (not_tls, no_certificate, unknown_authority, …).",
	}, []string{"reason"})
	for _, r := range refusalReasons {
		c.WithLabelValues(r)
	}
	return &refusals{log: log, now: now, counter: c, lines: ratelimit.NewKeyed[string](1, refusalLogEvery, len(refusalReasons))}
}

func (r *refusals) refused(remote net.Addr, reason string, err error) {
	r.counter.WithLabelValues(reason).Inc()
	ok, quiet := r.lines.Allow(reason, r.now())
	if !ok {
		return
	}
	r.log.Warn("raft: peer refused; it got no raft data", "remote", remote.String(), "reason", reason,
		"err", clip(err.Error()), "suppressed", quiet)
}

// maxErrLen bounds a logged handshake error: it can quote names from the
// peer's certificate.
const maxErrLen = 200

func clip(s string) string {
	if len(s) <= maxErrLen {
		return s
	}
	cut := maxErrLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
