package main

import (
	"context"
	"errors"
	"net"
	"strconv"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
)

// scriptPreview renders scripts for the admin API. Over HTTP the base URL
// comes from http.advertise or the request's Host; here it is
// http.advertise, or this appliance's address on its first network-boot
// interface.
type scriptPreview struct{ a *appliance }

func (p scriptPreview) Render(ctx context.Context, req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScript, error) {
	base, err := p.a.baseURL()
	if err != nil {
		return nil, err
	}
	return p.a.script.RenderAt(ctx, req, base)
}

// baseURL is http.advertise, else http://<address>:<http port> where the
// address is http.listen's host if it names one, else the first DHCP
// interface's, else the first up non-loopback IPv4 address.
func (a *appliance) baseURL() (string, error) {
	if a.cfg.HTTP.Advertise != "" {
		return a.cfg.HTTP.Advertise, nil
	}
	host, port, _ := net.SplitHostPort(a.httpLn.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = a.firstAddress()
	}
	if host == "" {
		return "", errors.New("no address to put into script URLs: set http.advertise")
	}
	if port == "80" {
		return "http://" + host, nil
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func (a *appliance) firstAddress() string {
	for _, c := range a.dhcpConn {
		if c.IP != nil {
			return c.IP.String()
		}
	}
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, addr := range addrs {
			if n, ok := addr.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return ""
}

// listeners reports where the network services listen.
func (a *appliance) listeners() []*sitebootv1.Listener {
	out := []*sitebootv1.Listener{
		{Service: "admin", Address: a.cfg.Admin.Socket},
		{Service: "http", Address: a.httpLn.Addr().String()},
	}
	for _, c := range a.dhcpConn {
		ip := ""
		if c.IP != nil {
			ip = c.IP.String()
		}
		out = append(out, &sitebootv1.Listener{Service: "dhcp", Address: c.Iface + "/" + net.JoinHostPort(ip, strconv.Itoa(c.Port))})
	}
	if a.tftpConn != nil {
		out = append(out, &sitebootv1.Listener{Service: "tftp", Address: a.tftpConn.LocalAddr().String()})
	}
	return out
}
