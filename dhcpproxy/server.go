package dhcpproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteboot/siteboot/discovery"
)

// Decision results, the "result" label of siteboot_dhcp_requests_total.
const (
	resultOffer        = "offer"
	resultAck          = "ack"
	resultUnknownMAC   = "unknown-mac"
	resultUUIDMismatch = "uuid-mismatch" // the entry pins another product_uuid
	resultGateClosed   = "gate-closed"
	resultNoBootFile   = "no-bootfile"
	resultIgnored      = "ignored"
)

// Server answers proxyDHCP requests. It is safe for concurrent use.
type Server struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	limits logLimits
	drops  *dropCollector
}

// Arrival says where a packet came in.
type Arrival struct {
	// Iface is the arrival interface's name (for logs).
	Iface string
	// ServerIP is the arrival interface's IPv4 address: the server identity
	// (siaddr, option 54) unless Config.AdvertiseIP overrides it.
	ServerIP net.IP
	// Port is the service the socket serves, ServerPort or PXEPort,
	// whatever port it is actually bound to.
	Port int
	// Source is the sender's address; PXEPort replies go back to it.
	Source *net.UDPAddr
	// Net is the arrival interface's IPv4 subnet (its address and prefix
	// length). It tells on-link relays and clients, and the network and
	// directed-broadcast addresses no reply is sent to. Without it no
	// relay is trusted beyond dhcp.relays and no reply goes to ciaddr.
	Net netip.Prefix
	// Dst is the packet's destination address (IP_PKTINFO); the zero Addr
	// when the socket does not report it. A relay sends unicast to this
	// server; a broadcast with giaddr set comes from no relay.
	Dst netip.Addr
}

// New checks cfg and returns a Server. It binds nothing.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	drops := newDropCollector()
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(drops); err != nil {
			return nil, fmt.Errorf("dhcpproxy: register metrics: %w", err)
		}
	}
	// The stages' counters, looked up once: the count is on the hot path
	// of a storm, and every stage's series exists from the start.
	byStage := map[string]prometheus.Counter{}
	for _, st := range []string{stagePXE, stageIPXE, stageUnknown, stageRelay} {
		byStage[st] = m.suppressed.WithLabelValues(st)
	}
	suppressed := func(stage string) { byStage[stage].Inc() }
	return &Server{cfg: cfg, log: cfg.Logger, m: m, limits: newLogLimits(suppressed), drops: drops}, nil
}

// Handle decides what to answer to one packet that arrived as in. It
// returns the encoded reply and where to send it, or ok=false when the
// packet gets no answer. It logs the decision and counts it; the lease gate
// is checked last, right before a reply is returned.
func (s *Server) Handle(pkt []byte, in Arrival) (reply []byte, to *net.UDPAddr, ok bool) {
	start := time.Now()
	d := s.decide(pkt, in)
	s.m.latency.Observe(time.Since(start).Seconds())
	s.m.requests.WithLabelValues(d.msgType, d.result).Inc()
	s.logDecision(&d, in)
	return d.reply, d.to, d.reply != nil
}

// serverIP is the address this server calls itself for a packet that
// arrived as in; nil when there is none.
func (s *Server) serverIP(in Arrival) net.IP {
	if s.cfg.AdvertiseIP != nil {
		return s.cfg.AdvertiseIP
	}
	if ip := in.ServerIP.To4(); ip != nil && !ip.IsUnspecified() {
		return ip
	}
	return nil
}

// sighting is what a request says about its machine, for the ledger or the
// observations, with the relay it was accepted from (none when it came
// directly); a relay of Config.Relays is also the source new-machine
// limits count it against. It allocates nothing.
func (s *Server) sighting(c *client, d *decision, in Arrival) discovery.Sighting {
	sg := discovery.Sighting{MAC: c.mac, ProductUUID: c.uuid, Arch: d.arch, Iface: in.Iface, At: s.cfg.Now()}
	if d.relay.IsValid() {
		sg.Relay = d.giaddr // the same address, already in a slice
		if d.viaConf {
			sg.Source = d.relay
		}
	}
	return sg
}

// logDecision writes the one line per packet: Info for answers, Warn when
// a known machine has no boot file, Debug for everything ignored. Every
// line a client can cause at will is written within the limits of
// logLimits (one per MAC and boot stage per window for answers and
// missing boot files, the same and per source for unknown machines, per
// source for refused relays), at Debug beyond them: a booting machine
// writes one Info line for its firmware's offers and one for iPXE's.
func (s *Server) logDecision(d *decision, in Arrival) {
	level, held := slog.LevelInfo, slog.Attr{}
	switch {
	case d.result == resultOffer, d.result == resultAck:
		level, held = s.limits.answerLevel(slog.LevelInfo, d.mac, d.stage(), s.cfg.Now())
	case d.result == resultNoBootFile:
		level, held = s.limits.answerLevel(slog.LevelWarn, d.mac, d.stage(), s.cfg.Now())
	case d.result == resultUnknownMAC:
		level, held = s.limits.level(slog.LevelInfo, stageUnknown, d.mac, sourceOf(d, in), s.cfg.Now())
	case d.result == resultUUIDMismatch:
		level, held = s.limits.level(slog.LevelWarn, stageUnknown, d.mac, sourceOf(d, in), s.cfg.Now())
	case d.result == resultIgnored && d.reason == reasonUntrusted:
		level, held = s.limits.level(slog.LevelInfo, stageRelay, "", sourceOf(d, in), s.cfg.Now())
	case d.result == resultIgnored, d.result == resultGateClosed:
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("decision", d.label()),
		slog.String("mac", d.mac),
		slog.String("xid", d.xid.String()),
		slog.String("iface", in.Iface),
		slog.Int("port", in.Port),
		slog.String("giaddr", ipString(d.giaddr)),
		slog.Uint64("epoch", d.epoch),
		slog.String("arch", d.arch),
	}
	if d.result == resultNoBootFile || d.result == resultUUIDMismatch {
		attrs = append(attrs, slog.String("reason", d.reason))
	}
	if d.file != "" {
		attrs = append(attrs, slog.String("file", d.file))
	}
	if d.to != nil {
		attrs = append(attrs, slog.String("to", d.to.String()))
	}
	if held.Key != "" {
		attrs = append(attrs, held)
	}
	s.log.LogAttrs(ctx, level, "dhcpproxy: decision", attrs...)
}

// ipString is ip in dotted form, or "" for none.
func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}
