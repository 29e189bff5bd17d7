package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
	// ID is the raft server id: the appliance's node id.
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
	// Margin is what a new holder waits beyond TTL after winning, for clock
	// rate differences (1 s if zero).
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

	mu      sync.Mutex
	epoch   uint64 // the epoch this node took; 0 while it holds none
	readyCh chan struct{}
	ready   bool
}

const applyTimeout = 10 * time.Second

// Open opens (or creates) the raft state in cfg.Dir and starts raft. A data
// dir without raft state is bootstrapped as a single-voter cluster.
func Open(cfg Config) (*Node, error) { return open(cfg, true) }

// open is Open; without bootstrap a data dir without raft state waits to
// be added to a cluster.
func open(cfg Config, bootstrap bool) (*Node, error) {
	if cfg.ID == "" || cfg.StateMachine == nil || cfg.Logger == nil {
		return nil, errors.New("lease: Config needs ID, StateMachine and Logger")
	}
	if err := CheckTransport(cfg.Bind, cfg.TLS); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
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
		readyCh: make(chan struct{}), refusals: newRefusals(cfg.Logger, time.Now), skipped: skipped, fwd: newForwarder()}
	if err := n.start(db, bootstrap); err != nil {
		if n.store != nil {
			_ = n.store.Close()
		}
		if n.trans != nil {
			closeTransport(n.trans)
		}
		return nil, err
	}
	close(n.fwd.started)
	return n, nil
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
		boot := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: n.trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(conf, logs, n.store, snaps, n.trans, boot); err != nil {
			return fmt.Errorf("lease: bootstrap: %w", err)
		}
		n.log.Info("raft bootstrapped as a single voter", "id", n.cfg.ID, "dir", n.cfg.Dir)
	}
	if db.bootstrapping() {
		if n.store, err = db.install(n.store); err != nil {
			return err
		}
		if logs, err = raft.NewLogCache(512, n.store); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, logs, n.store, snaps, n.trans); err != nil {
		return fmt.Errorf("lease: start raft: %w", err)
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
	stream := newStreamLayer(ln, streamConfig{tls: peer, refusals: n.refusals,
		handshakeTimeout: handshakeTimeout, maxConns: maxPeerConns, maxHandshakes: maxHandshakes, forward: n.serveForward})
	n.fwd.stream = stream
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: applyTimeout, Logger: newHclog(n.log),
	}), nil
}

func (n *Node) raftConfig() *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(n.cfg.ID)
	conf.Logger = newHclog(n.log)
	if n.cfg.Bind == "" {
		// A single voter has nobody to wait for: elect within a fraction of a
		// second instead of raft's 1 s network defaults.
		conf.HeartbeatTimeout = 150 * time.Millisecond
		conf.ElectionTimeout = 150 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
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
	n.setEpoch(0)
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
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		_, id := n.raft.LeaderWithID()
		return &NotLeaderError{Leader: string(id)}
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
