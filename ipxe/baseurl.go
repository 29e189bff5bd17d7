package ipxe

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
)

// errNoArrival is a request whose connection reports no local address, so
// no base URL can be made for it (a handler called outside http.Server).
var errNoArrival = errors.New("ipxe: the connection has no local address to put into script URLs (set http.advertise)")

// baseURL is Config.BaseURL, or else the address the request arrived at:
// the connection's local address (http.LocalAddrContextKey), the one the
// machine itself dialled. The Host header is never used: whoever sends a
// request chooses it, and it would go into the URLs the script makes the
// machine fetch next.
func (s *Server) baseURL(r *http.Request) (string, error) {
	if s.base != "" {
		return s.base, nil
	}
	ap, ok := localAddr(r)
	if !ok {
		return "", errNoArrival
	}
	scheme, defPort := "http://", uint16(80)
	if r.TLS != nil {
		scheme, defPort = "https://", 443
	}
	host := ap.Addr().String()
	if ap.Addr().Is6() {
		host = "[" + host + "]"
	}
	if ap.Port() != defPort {
		host += ":" + strconv.Itoa(int(ap.Port()))
	}
	return scheme + host, nil
}

// localAddr is the request's arrival address: IPv4 unmapped, without an
// IPv6 zone, never unspecified.
func localAddr(r *http.Request) (netip.AddrPort, bool) {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if la == nil {
		return netip.AddrPort{}, false
	}
	var ap netip.AddrPort
	if ta, ok := la.(*net.TCPAddr); ok {
		ap = ta.AddrPort()
	} else if p, err := netip.ParseAddrPort(la.String()); err == nil {
		ap = p
	}
	a := ap.Addr().Unmap().WithZone("")
	if !a.IsValid() || a.IsUnspecified() {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a, ap.Port()), true
}
