package appliance

import (
	"context"
	"errors"
	"net"
	"strconv"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/ipxe"
)

// RenderScript returns the iPXE script /ipxe would serve the machine req
// describes now, without recording it as discovered. Unless reveal is set
// the discovery token and the assertion are shown as ipxe.Redacted and
// nothing is signed; who may reveal is the transport's decision (the admin
// API: root only). Over HTTP the base URL comes from http.advertise or the
// request; here it is http.advertise, or this appliance's address on its
// first network-boot interface.
func (a *Appliance) RenderScript(ctx context.Context, req *sitev1.IpxeScriptRequest, reveal bool) (*sitev1.IpxeScript, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	base, err := a.baseURL()
	if err != nil {
		return nil, err
	}
	script, err := a.script.Preview(ctx, req, base, reveal)
	var unknown *ipxe.UnknownMachineError
	if errors.As(err, &unknown) {
		return unknown.Script, nil
	}
	return script, err
}

// Discovered lists the machines that network-booted without a live entry,
// most recently seen first.
func (a *Appliance) Discovered(context.Context) ([]*agentv1.DiscoveredMachine, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	return a.ledger.List(), nil
}

// baseURL is http.advertise, else http://<address>:<http port> where the
// address is http.listen's host if it names one, else the first DHCP
// interface's, else the first up non-loopback IPv4 address.
func (a *Appliance) baseURL() (string, error) {
	if a.cfg.HTTP.Advertise != "" {
		return a.cfg.HTTP.Advertise, nil
	}
	host, port, _ := net.SplitHostPort(a.httpLn.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = a.firstAddress()
	}
	if host == "" {
		return "", ErrNoAddress
	}
	if port == "80" {
		return "http://" + host, nil
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func (a *Appliance) firstAddress() string {
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

// ErrNoAddress: no address of this appliance is known to put into script
// URLs; http.advertise names one.
var ErrNoAddress = errors.New("no address to put into script URLs: set http.advertise")

// Listener is one network service and where it listens.
type Listener struct {
	Service, Address string
}

// Listeners reports where the network services listen.
func (a *Appliance) Listeners() []Listener {
	out := []Listener{
		{Service: "admin", Address: a.cfg.Admin.Socket},
		{Service: "http", Address: a.httpLn.Addr().String()},
	}
	for _, c := range a.dhcpConn {
		ip := ""
		if c.IP != nil {
			ip = c.IP.String()
		}
		out = append(out, Listener{Service: "dhcp", Address: c.Iface + "/" + net.JoinHostPort(ip, strconv.Itoa(c.Port))})
	}
	if a.tftpConn != nil {
		out = append(out, Listener{Service: "tftp", Address: a.tftpConn.LocalAddr().String()})
	}
	return out
}
