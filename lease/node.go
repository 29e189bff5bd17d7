package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// Mode is where the boot lease comes from.
type Mode string

const (
	// Standalone: a single-voter raft; this appliance holds the lease
	// whenever it runs.
	Standalone Mode = "standalone"
	// Cluster: 3 or 5 voters; the raft leader holds the lease.
	Cluster Mode = "cluster"
	// External: a control plane pushes BootLeaseState (UpdateLease) and must
	// renew it within its ttl.
	External Mode = "external"
)

// Config configures a Node.
type Config struct {
	// Mode is the lease source; empty is Standalone.
	Mode Mode
	// Dir holds raft.db (log and stable store) and snapshots/. It is created
	// with mode 0700 when missing.
	Dir string
	// ID is the appliance's node id: the holder named in the epochs it
	// takes, and its raft server id except in cluster mode.
	ID string
	// Bind is the raft TCP address ("10.0.0.2:7390"), also the address
	// peers dial. Empty selects an in-memory transport: nothing listens,
	// and only a single voter can run. CheckTransport says which Bind and
	// TLS go together: anything but a loopback address needs TLS.
	Bind string
	// Advertise is the raft address the other voters dial (default Bind).
	// In cluster mode it is also this voter's raft server id.
	Advertise string
	// Join are the raft addresses of the other voters (cluster mode): two or
	// four. Appliances started with each other's addresses bootstrap one
	// cluster with the same configuration.
	Join []string
	// Margin is what a new holder waits beyond TTL after winning (cluster
	// mode), for clock rate differences between the members (1 s if zero).
	Margin time.Duration
	// PublicKey is the PKIX DER of this appliance's node key, published
	// through the log so every member can serve the site's keys.
	PublicKey []byte
	// Registerer receives the lease metrics (none if nil).
	Registerer prometheus.Registerer
	// TLS makes the raft transport mutual TLS 1.3: peers are accepted and
	// dialed only with a certificate chained to TLS.CA.
	TLS TLSFiles
	// TTL is the lease ttl published in BootLeaseState.ttl_ms (10 s if zero).
	TTL time.Duration
	// StateMachine receives the site commands of the log.
	StateMachine StateMachine
	// Logger receives raft's and the lease's log lines.
	Logger *slog.Logger
	// HeartbeatTimeout and ElectionTimeout tune raft; zero picks values
	// suited to the cluster size (fast for a single voter).
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// SnapshotThreshold is the number of log entries between snapshots (8192
	// if zero).
	SnapshotThreshold uint64
}

// Node is a raft member carrying the site state and the boot lease.
type Node struct {
	cfg   Config
	log   *slog.Logger
	raft  *raft.Raft
	fsm   *fsm
	store *raftboltdb.BoltStore
	trans raft.Transport
	fwd   *forwarder // forwarded writes, both ways

	refusals *refusals
	skipped  prometheus.Counter
	fences   *prometheus.CounterVec

	// verify re-verifies raft leadership (verifyLeadership); tests stall
	// it to stand for a paused process or a blocked disk.
	verify func() error
	// lastAtOpen is the last log index on disk when the node opened: a
	// cluster member is ready once it applied that far.
	lastAtOpen uint64
	// pushMu serializes UpdateLease calls.
	pushMu sync.Mutex

	mu       sync.Mutex
	win      window      // this node's lease window
	events   uint64      // fence events so far
	watchdog *time.Timer // fires at win.until
	readyCh  chan struct{}
	ready    bool
}

const applyTimeout = 10 * time.Second

// MinTTL is the shortest lease ttl a Node takes (cluster mode needs more,
// see the appliance's lease.ttl).
const MinTTL = 100 * time.Millisecond

// Open opens (or creates) the raft state in cfg.Dir and starts raft. A data
// dir without raft state is bootstrapped: as a single voter (standalone and
// external mode), or in cluster mode with the voters Advertise and Join, the
// same configuration on every member.
func Open(cfg Config) (*Node, error) { return open(cfg, true) }

// open is Open; without bootstrap a data dir without raft state waits to
// be added to a cluster.
func open(cfg Config, bootstrap bool) (*Node, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "snapshots"), 0o700); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	db, store, err := openRaftDB(cfg.Dir, bootstrap)
	if err != nil {
		return nil, err
	}
	skipped := newSkippedCounter()
	n := &Node{cfg: cfg, log: cfg.Logger, store: store, fsm: newFSM(cfg.StateMachine, cfg.Logger, skipped),
		readyCh: make(chan struct{}), refusals: newRefusals(cfg.Logger, time.Now), skipped: skipped,
		fences: newFenceCounter(), win: window{reason: "no lease held yet"}, fwd: newForwarder()}
	if err := n.start(db, bootstrap); err != nil {
		if n.raft != nil {
			_ = n.raft.Shutdown().Error()
		}
		if n.store != nil {
			_ = n.store.Close()
		}
		if n.trans != nil {
			closeTransport(n.trans)
		}
		return nil, err
	}
	close(n.fwd.started)
	n.verify = n.verifyLeadership
	if cfg.Registerer != nil {
		if err := n.registerMetrics(cfg.Registerer); err != nil {
			_ = n.Close()
			return nil, fmt.Errorf("lease: metrics: %w", err)
		}
	}
	return n, nil
}

// fill checks cfg and fills its defaults.
func (cfg *Config) fill() error {
	if cfg.ID == "" || cfg.StateMachine == nil || cfg.Logger == nil {
		return errors.New("lease: Config needs ID, StateMachine and Logger")
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = Standalone
	case Standalone, External:
		if len(cfg.Join) > 0 {
			return &TransportError{Field: "join", Reason: fmt.Sprintf("lists other voters, but mode %s runs a single voter; join is for mode cluster", cfg.Mode)}
		}
	case Cluster:
		if cfg.Bind == "" {
			return &TransportError{Field: "bind", Reason: "is required in mode cluster: the voters dial each other there"}
		}
		if cfg.Advertise == "" {
			cfg.Advertise = cfg.Bind
		}
		if _, err := CheckVoters(cfg.Advertise, cfg.Join); err != nil {
			return err
		}
		if err := checkPlainVoters(cfg.Advertise, cfg.Join, cfg.TLS); err != nil {
			return err
		}
	default:
		return fmt.Errorf("lease: mode %q: want standalone, cluster or external", cfg.Mode)
	}
	if err := CheckTransport(cfg.Bind, cfg.TLS); err != nil {
		return err
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Margin == 0 {
		cfg.Margin = time.Second
	}
	if cfg.TTL < 0 || cfg.Margin < 0 {
		return errors.New("lease: TTL and Margin must not be negative")
	}
	if cfg.TTL < MinTTL {
		return fmt.Errorf("lease: TTL %s is below %s: the holder renews every ttl/3", cfg.TTL, MinTTL)
	}
	return nil
}

func (n *Node) start(db *raftDB, bootstrap bool) error {
	hl := newHclog(n.log)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.Dir, 2, hl)
	if err != nil {
		return fmt.Errorf("lease: snapshot store: %w", err)
	}
	if n.trans, err = n.transport(); err != nil {
		return err
	}
	conf := n.raftConfig()
	logs, err := raft.NewLogCache(512, n.store)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	has, err := db.hasState(logs, n.store, snaps)
	if err != nil {
		return fmt.Errorf("lease: read raft state: %w", err)
	}
	switch {
	case !has && bootstrap && !db.bootstrapping():
		return db.noState()
	case !has && bootstrap:
		boot := n.bootConfiguration(conf.LocalID)
		if err := raft.BootstrapCluster(conf, logs, n.store, snaps, n.trans, boot); err != nil {
			return fmt.Errorf("lease: bootstrap: %w", err)
		}
		n.log.Info("raft bootstrapped", "mode", n.cfg.Mode, "id", conf.LocalID, "voters", len(boot.Servers), "dir", n.cfg.Dir)
	}
	if db.bootstrapping() {
		if n.store, err = db.install(n.store); err != nil {
			return err
		}
		if logs, err = raft.NewLogCache(512, n.store); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
	}
	if n.lastAtOpen, err = n.store.LastIndex(); err != nil {
		return fmt.Errorf("lease: read raft log: %w", err)
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, logs, n.store, snaps, n.trans); err != nil {
		return fmt.Errorf("lease: start raft: %w", err)
	}
	if has {
		return n.checkMembership()
	}
	return nil
}

// bootConfiguration is the configuration a fresh data dir starts with:
// this node alone, or in cluster mode every voter, each with its raft
// address as its id, so that every member bootstraps the same one.
func (n *Node) bootConfiguration(id raft.ServerID) raft.Configuration {
	if n.cfg.Mode != Cluster {
		return raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: id, Address: n.trans.LocalAddr()}}}
	}
	voters, _ := CheckVoters(n.cfg.Advertise, n.cfg.Join) // fill checked them
	var c raft.Configuration
	for _, v := range voters {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v), Address: raft.ServerAddress(v)})
	}
	return c
}

// checkMembership refuses raft state written in another mode: a
// standalone data dir started in cluster mode would lead its old
// single-voter configuration alone and hold the lease next to the
// cluster; a cluster member's data dir started standalone would never
// lead.
func (n *Node) checkMembership() error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("lease: read raft configuration: %w", err)
	}
	servers := f.Configuration().Servers
	var ids []string
	self := false
	for _, s := range servers {
		ids = append(ids, string(s.ID))
		self = self || s.ID == n.raftID()
	}
	single := len(servers) == 1 && self
	switch {
	case len(servers) == 0:
		return nil // waits to be added
	case n.cfg.Mode == Cluster && !self, n.cfg.Mode != Cluster && !single:
		return fmt.Errorf("lease: the raft state in %s belongs to the voters %v, which do not include this one as %s in mode %s: "+
			"start it with the mode and addresses it was created with, or move the data dir away to start afresh (which forgets every entry)",
			n.cfg.Dir, ids, n.raftID(), n.cfg.Mode)
	}
	return nil
}

// raftID is this node's raft server id: its advertised raft address in
// cluster mode, its node id otherwise.
func (n *Node) raftID() raft.ServerID {
	if n.cfg.Mode == Cluster {
		return raft.ServerID(n.cfg.Advertise)
	}
	return raft.ServerID(n.cfg.ID)
}

// CheckVoters holds the rule for a cluster's voters: advertise (this
// voter's raft address) and join (the others') are host:port, and together
// they are 3 or 5 distinct voters. It returns them sorted. Two or four
// voters are refused: a majority of 2 is 2 and of 4 is 3, so they stop
// when 1 or 2 fail, no better than 1 or 3 voters; one voter is mode
// standalone.
func CheckVoters(advertise string, join []string) ([]string, error) {
	if err := checkRaftAddress(advertise); err != nil {
		return nil, &TransportError{Field: "advertise", Reason: err.Error()}
	}
	set := map[string]bool{advertise: true}
	for i, j := range join {
		if err := checkRaftAddress(j); err != nil {
			return nil, &TransportError{Field: fmt.Sprintf("join[%d]", i), Reason: err.Error()}
		}
		set[j] = true
	}
	voters := slices.Sorted(maps.Keys(set))
	switch len(voters) {
	case 3, 5:
		return voters, nil
	case 1:
		return nil, &TransportError{Field: "join", Reason: "lists no other voter: a cluster of one is mode standalone; list the other voters' raft addresses (3 or 5 voters in all)"}
	case 2, 4:
		return nil, &TransportError{Field: "join", Reason: fmt.Sprintf("gives %d voters: %d voters stop when %d fail, which tolerates no more failures than %d voters; use 3 or 5",
			len(voters), len(voters), len(voters)/2, len(voters)-1)}
	}
	return nil, &TransportError{Field: "join", Reason: fmt.Sprintf("gives %d voters; a site runs 3 or 5 (more make every write slower and add nothing needed here)", len(voters))}
}

// checkPlainVoters holds the loopback rule of CheckTransport for every
// voter address when raft runs without TLS: an advertised address that is
// not loopback would let the others, and whoever else is on that network,
// reach this plain raft port through a forward; a join address that is not
// loopback would be sent the site state in clear and trusted unverified.
func checkPlainVoters(advertise string, join []string, files TLSFiles) error {
	if files.Set() {
		return nil
	}
	reason := func(a string) string {
		return fmt.Sprintf("%q is not a loopback address and raft TLS is not configured: peers on the network must "+
			"authenticate each other, so set tls.ca, tls.cert and tls.key (plain TCP raft is for tests, on loopback only)", a)
	}
	if !isLoopbackBind(advertise) {
		return &TransportError{Field: "advertise", Reason: reason(advertise)}
	}
	for i, j := range join {
		if !isLoopbackBind(j) {
			return &TransportError{Field: fmt.Sprintf("join[%d]", i), Reason: reason(j)}
		}
	}
	return nil
}

// checkRaftAddress accepts host:port with a host and a port 1..65535.
func checkRaftAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", a, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: the port must be 1..65535", a)
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) || len(a) > 255 {
		return fmt.Errorf("%q: name the one address the other voters dial (like 10.0.0.2:7390)", a)
	}
	return nil
}

func (n *Node) transport() (raft.Transport, error) {
	if n.cfg.Bind == "" {
		_, t := raft.NewInmemTransport(raft.ServerAddress("inmem:" + n.cfg.ID))
		return t, nil
	}
	var peer *peerTLS
	if n.cfg.TLS.Set() {
		host, _, _ := net.SplitHostPort(n.cfg.Bind) // CheckTransport passed
		var err error
		if peer, err = loadPeerTLS(n.cfg.TLS, host); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", n.cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("lease: raft listen %s: %w", n.cfg.Bind, err)
	}
	if peer == nil {
		n.log.Warn("lease: the raft port speaks plain TCP on loopback; that is for tests only, "+
			"a raft port others can reach needs TLS (lease.raft.tls.*)", "bind", ln.Addr().String())
	}
	sl := newStreamLayer(ln, streamConfig{tls: peer, refusals: n.refusals,
		handshakeTimeout: handshakeTimeout, maxConns: maxPeerConns, maxHandshakes: maxHandshakes, maxHandshakesPerHost: maxHandshakesPerHost,
		forward: n.serveForward})
	n.fwd.stream = sl
	var stream raft.StreamLayer = sl
	if n.cfg.Mode == Cluster {
		// The address the others dial, which may differ from the one bound
		// (a NAT, a name): raft tells its peers LocalAddr.
		stream = advertised{StreamLayer: stream, addr: raftAddr(n.cfg.Advertise)}
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: applyTimeout, Logger: newHclog(n.log),
	}), nil
}

// advertised is a stream layer whose Addr is the advertised address.
type advertised struct {
	raft.StreamLayer
	addr raftAddr
}

func (a advertised) Addr() net.Addr { return a.addr }

// raftAddr is a host:port as a net.Addr.
type raftAddr string

func (a raftAddr) Network() string { return "tcp" }
func (a raftAddr) String() string  { return string(a) }

func (n *Node) raftConfig() *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = n.raftID()
	conf.Logger = newHclog(n.log)
	if n.cfg.Bind == "" {
		// A single voter has nobody to wait for: elect within a fraction of a
		// second instead of raft's 1 s network defaults.
		conf.HeartbeatTimeout = 150 * time.Millisecond
		conf.ElectionTimeout = 150 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
	}
	if n.cfg.Mode == Cluster {
		// A failover costs the time to notice the leader is gone plus
		// ttl + margin; raft's 1 s defaults (meant for WANs) make the first
		// part 1-3 s. Voters of one site sit on one LAN: half of that
		// notices a dead holder within about a second and still leaves
		// heartbeats (every HeartbeatTimeout/10) many tries per timeout.
		conf.HeartbeatTimeout = 500 * time.Millisecond
		conf.ElectionTimeout = 500 * time.Millisecond
		conf.LeaderLeaseTimeout = 250 * time.Millisecond
	}
	if n.cfg.HeartbeatTimeout > 0 {
		conf.HeartbeatTimeout = n.cfg.HeartbeatTimeout
		conf.LeaderLeaseTimeout = n.cfg.HeartbeatTimeout / 2
	}
	if n.cfg.ElectionTimeout > 0 {
		conf.ElectionTimeout = n.cfg.ElectionTimeout
	}
	if n.cfg.SnapshotThreshold > 0 {
		conf.SnapshotThreshold = n.cfg.SnapshotThreshold
	}
	return conf
}

func closeTransport(t raft.Transport) {
	if c, ok := t.(interface{ CloseStreams() }); ok {
		c.CloseStreams() // the pooled outbound connections
	}
	if c, ok := t.(raft.WithClose); ok {
		_ = c.Close()
	}
}

// Close stops raft and releases the data dir.
func (n *Node) Close() error {
	n.release("the appliance is stopping")
	n.mu.Lock()
	if n.watchdog != nil {
		n.watchdog.Stop()
	}
	n.mu.Unlock()
	err := n.raft.Shutdown().Error()
	closeTransport(n.trans)
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// ApplySite commits a serialized site command and returns the state
// machine's result for it. A follower forwards it to the leader; with no
// leader known it fails with a *NotLeaderError.
func (n *Node) ApplySite(ctx context.Context, cmd []byte) (any, error) {
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_SiteCommand{SiteCommand: cmd}})
	if err != nil {
		return nil, fmt.Errorf("lease: encode: %w", err)
	}
	return n.write(ctx, data)
}

func (n *Node) apply(ctx context.Context, data []byte) (any, error) {
	timeout := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return nil, n.applyError(err)
	}
	return f.Response(), nil
}

func (n *Node) applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		_, id := n.raft.LeaderWithID()
		return &NotLeaderError{Leader: string(id)}
	case errors.Is(err, raft.ErrLeadershipLost):
		// Appended, perhaps committed: not a refusal a caller may simply
		// retry.
		return fmt.Errorf("%w (raft leadership was lost before it was confirmed)", ErrOutcomeUnknown)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("lease: %w", ErrBusy)
	}
	return fmt.Errorf("lease: apply: %w", err)
}

// Snapshot writes a raft snapshot now and truncates the log behind it.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("lease: snapshot: %w", err)
	}
	return nil
}

// AppliedIndex is the last log index applied to the local state.
func (n *Node) AppliedIndex() uint64 { return n.fsm.applied.Load() }

// RaftState is this node's raft role ("Leader", "Follower", …).
func (n *Node) RaftState() string { return n.raft.State().String() }
