package httpproxy

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redact"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// maxURLBytes bounds the URL a request may name.
const maxURLBytes = 8 << 10

// target is a URL that passed the allow-list: where to connect and what
// to send.
type target struct {
	https bool
	// host is the URL host normalised: a lower-case name without its
	// trailing dot, or an IP's string (IPv4-mapped IPv6 unmapped).
	host   string
	isName bool
	port   uint16
	// authority is host[:port] as in the request line and the Host header:
	// the port only when the URL had one.
	authority string
	// reqURL is the URL sent: scheme, authority, path and query.
	reqURL string
	// ips are the checked addresses; ips[0] is dialled.
	ips []netip.Addr
}

// dialAddr is the checked address the request connects to.
func (t *target) dialAddr() netip.AddrPort { return netip.AddrPortFrom(t.ips[0], t.port) }

// dialAuthority is what net/http asks the dialer for: host:port, the
// default port filled in.
func (t *target) dialAuthority() string {
	return joinHostPort(t.host, t.port)
}

// forbidden is a forbidden-target error.
func forbidden(format string, args ...any) error {
	return relayerr.New(relayerr.ForbiddenTarget, format, args...)
}

// parsedURL is the syntax of a request URL, before the allow-list.
type parsedURL struct {
	https   bool
	ip      netip.Addr // valid when the host is an IP literal
	name    string     // the normalised name otherwise
	port    uint16
	hasPort bool
	u       *url.URL
}

// parseURL checks the syntax of raw strictly. Anything it does not accept
// is forbidden-target: a URL that cannot be read as exactly one allowed
// host is not an allowed target. Messages never echo the raw URL (it may
// hold user info or a token in its query).
func parseURL(raw string) (*parsedURL, error) {
	if len(raw) > maxURLBytes {
		return nil, forbidden("url is longer than %d bytes", maxURLBytes)
	}
	// net/url keeps a raw space (and bytes beyond ASCII) of the query as
	// it is, and net/http writes it into the request line: "?a HTTP/1.0 x"
	// would make a request line of the caller's shape. A URI has none.
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f {
			return nil, forbidden("url has a space, a control byte or a non-ASCII byte (percent-encode it)")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, forbidden("url does not parse")
	}
	p := &parsedURL{u: u}
	switch strings.ToLower(u.Scheme) {
	case "https":
		p.https = true
	case "http":
	default:
		return nil, forbidden("url scheme %q is not http or https", redact.Clip(u.Scheme))
	}
	switch {
	case u.Opaque != "" || !strings.HasPrefix(strings.ToLower(raw), u.Scheme+"://"):
		return nil, forbidden("url %s has no //host", redact.URL(raw))
	case u.User != nil || strings.Contains(rawAuthority(raw), "@"):
		return nil, forbidden("url %s has user info", redact.URL(raw))
	case strings.Contains(raw, "#"):
		return nil, forbidden("url %s has a fragment", redact.URL(raw))
	}
	if err := p.parseAuthority(rawAuthority(raw)); err != nil {
		return nil, err
	}
	return p, nil
}

// rawAuthority is the text between "scheme://" and the first of "/?#".
func rawAuthority(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return ""
	}
	rest := raw[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// parseAuthority reads host[:port] from the raw text (not from url.URL,
// which decodes percent escapes in a host).
func (p *parsedURL) parseAuthority(a string) error {
	for i := 0; i < len(a); i++ {
		if c := a[i]; !isHostByte(c) {
			if c == '%' {
				return forbidden("url host is percent-encoded or has a zone id")
			}
			return forbidden("url host has a character outside letters, digits, '.', '-', ':' and brackets")
		}
	}
	host, port, hasPort, err := splitHostPort(a)
	if err != nil {
		return err
	}
	if hasPort {
		n, err := parsePort(port)
		if err != nil {
			return err
		}
		p.port, p.hasPort = n, true
	} else if p.https {
		p.port = 443
	} else {
		p.port = 80
	}
	return p.parseHost(host, strings.HasPrefix(a, "["))
}

func isHostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '-' || c == ':' || c == '[' || c == ']'
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port".
func splitHostPort(a string) (host, port string, hasPort bool, err error) {
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", "", false, forbidden("url host has an unclosed '['")
		}
		host, rest := a[1:end], a[end+1:]
		switch {
		case rest == "":
			return host, "", false, nil
		case rest[0] == ':':
			return host, rest[1:], true, nil
		}
		return "", "", false, forbidden("url host has text after ']'")
	}
	if strings.ContainsAny(a, "[]") {
		return "", "", false, forbidden("url host has a misplaced bracket")
	}
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return a, "", false, nil
	}
	if strings.IndexByte(a[:i], ':') >= 0 {
		return "", "", false, forbidden("url host is an IPv6 address without brackets")
	}
	return a[:i], a[i+1:], true, nil
}

// parsePort accepts 1..65535 in plain decimal, no sign, no leading zero,
// and refuses the empty port of "host:".
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, forbidden("url port is empty")
	}
	if len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, forbidden("url port %q is not a decimal number in 1..65535", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, forbidden("url port %q is not a decimal number in 1..65535", s)
	}
	return uint16(n), nil
}

// parseHost classifies host as an IP literal or a DNS name.
func (p *parsedURL) parseHost(host string, bracketed bool) error {
	if host == "" {
		return forbidden("url host is empty")
	}
	if bracketed {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return forbidden("url host [%s] is not an IPv6 address", host)
		}
		p.ip = ip.Unmap()
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		p.ip = ip
		return nil
	}
	name, ok := normalName(host)
	if !ok {
		return forbidden("url host %q is neither an IP address nor a DNS name", redact.Clip(host))
	}
	p.name = name
	return nil
}

// normalName lower-cases s and drops one trailing dot, and reports whether
// the result is a DNS host name: labels of letters, digits and inner
// hyphens, at most 63 bytes each and 253 in all, the last label starting
// with a letter. That last rule refuses every string a resolver could read
// as an IPv4 address in another encoding (2130706433, 0x7f000001, 127.1,
// 0177.0.0.1): no top-level domain starts with a digit.
func normalName(s string) (string, bool) {
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", false
		}
	}
	last := labels[len(labels)-1]
	if last[0] < 'a' || last[0] > 'z' {
		return "", false
	}
	return s, true
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// allowList is one node's proxy_targets addresses, normalised.
type allowList struct {
	ips   map[netip.Addr]bool
	names map[string]bool
}

// allowListOf finds node's entry in spec. Addresses that are neither an
// IP literal (without zone) nor a DNS name never match anything.
func allowListOf(spec *sitev1.SiteSpec, node string) (allowList, error) {
	if node == "" {
		return allowList{}, relayerr.New(relayerr.InvalidArgs, "target_node_id is empty")
	}
	al := allowList{ips: map[netip.Addr]bool{}, names: map[string]bool{}}
	found := false
	for _, pt := range spec.GetProxyTargets() {
		if pt.GetNodeId() != node {
			continue
		}
		found = true
		for _, a := range pt.GetAddresses() {
			if ip, err := netip.ParseAddr(a); err == nil {
				if ip.Zone() == "" {
					al.ips[ip.Unmap()] = true
				}
			} else if n, ok := normalName(a); ok {
				al.names[n] = true
			}
		}
	}
	if !found {
		return allowList{}, forbidden("node %q has no proxy target", redact.Clip(node))
	}
	return al, nil
}

// checkTarget is the allow-list: raw must name an address of node, every
// IP it stands for must be an IP literal node lists and must pass
// p.checkIP. A name is resolved once, here; nothing else is sent before
// every check passed (an IP literal sends nothing at all).
func (p *Proxy) checkTarget(ctx context.Context, node, raw string) (*target, error) {
	al, err := allowListOf(p.cfg.Targets.Spec(), node)
	if err != nil {
		return nil, err
	}
	pu, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	t := &target{https: pu.https, port: pu.port}
	if pu.ip.IsValid() {
		if !al.ips[pu.ip] {
			return nil, forbidden("%s is not an address of node %q", pu.ip, redact.Clip(node))
		}
		t.host, t.ips = pu.ip.String(), []netip.Addr{pu.ip}
	} else {
		if !al.names[pu.name] {
			return nil, forbidden("%q is not an address of node %q", pu.name, redact.Clip(node))
		}
		t.host, t.isName = pu.name, true
		if t.ips, err = p.resolve(ctx, pu.name, al, node); err != nil {
			return nil, err
		}
	}
	if err := p.checkIPs(t.ips, t.https); err != nil {
		return nil, err
	}
	t.authority = t.host
	if pu.hasPort {
		t.authority = joinHostPort(t.host, t.port)
	} else if strings.Contains(t.host, ":") {
		t.authority = "[" + t.host + "]"
	}
	scheme := "http"
	if t.https {
		scheme = "https"
	}
	t.reqURL = (&url.URL{Scheme: scheme, Host: t.authority, Path: pu.u.Path,
		RawPath: pu.u.RawPath, RawQuery: pu.u.RawQuery}).String()
	return t, nil
}

// resolve looks name up once; every answer must be an IP literal node
// lists.
func (p *Proxy) resolve(ctx context.Context, name string, al allowList, node string) ([]netip.Addr, error) {
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, relayerr.New(relayerr.Timeout, "resolving %q took longer than the timeout", name)
	case err != nil:
		return nil, relayerr.New(relayerr.Unreachable, "resolve %q: no address", name)
	case len(addrs) == 0:
		return nil, relayerr.New(relayerr.Unreachable, "resolve %q: no address", name)
	}
	seen := map[netip.Addr]bool{}
	var ips []netip.Addr
	for _, a := range addrs {
		if a.Zone() != "" {
			return nil, forbidden("%q resolves to %s, an address with a zone", name, a)
		}
		a = a.Unmap()
		if !al.ips[a] {
			return nil, forbidden("%q resolves to %s, which node %q does not list as an IP address", name, a, redact.Clip(node))
		}
		if !seen[a] {
			seen[a] = true
			ips = append(ips, a)
		}
	}
	return ips, nil
}

func joinHostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}
