package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// clientOptions are the flags every client command shares.
type clientOptions struct {
	getenv  env
	socket  string
	server  string
	tlsCA   string
	tlsCert string
	tlsKey  string
	output  string
	timeout time.Duration
}

func (o *clientOptions) addFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&o.socket, "socket", "", "admin socket (env SITEBOOT_SOCKET; default /var/lib/siteboot/siteboot.sock as root, else ./siteboot-data/siteboot.sock)")
	f.StringVar(&o.server, "server", "", "admin API TCP address with mutual TLS, instead of the socket (env SITEBOOT_SERVER)")
	f.StringVar(&o.tlsCA, "tls-ca", "", "CA bundle that signed the server's certificate (with --server; env SITEBOOT_TLS_CA)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "client certificate (with --server; env SITEBOOT_TLS_CERT)")
	f.StringVar(&o.tlsKey, "tls-key", "", "client key (with --server; env SITEBOOT_TLS_KEY)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json (the API response as protojson)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the appliance")
}

func (o *clientOptions) socketPath() string {
	if o.socket != "" {
		return o.socket
	}
	if v, ok := o.getenv("SITEBOOT_SOCKET"); ok && v != "" {
		return v
	}
	if v, ok := o.getenv("SITEBOOT_ADMIN_SOCKET"); ok && v != "" {
		return v
	}
	sys := "/var/lib/siteboot/siteboot.sock"
	if _, err := os.Stat(sys); err == nil || os.Geteuid() == 0 {
		return sys
	}
	return filepath.Join("siteboot-data", "siteboot.sock")
}

// dial connects to the appliance, waits until it is ready (it has restored
// its state: reads and writes are served), and returns the client, a
// context bounded by --timeout, and a function that releases both. So
// `siteboot serve &` followed by any command just works: the command waits
// for the socket to appear and for the appliance to become ready.
func (o *clientOptions) dial(ctx context.Context) (sitebootv1.SiteBootClient, context.Context, func(), error) {
	return o.connect(ctx, true)
}

// connect is dial; with ready false it waits only for the connection (for
// status, which answers while the appliance starts).
func (o *clientOptions) connect(ctx context.Context, ready bool) (sitebootv1.SiteBootClient, context.Context, func(), error) {
	if o.output != "table" && o.output != "json" {
		return nil, nil, nil, fmt.Errorf("--output %q: want table or json", o.output)
	}
	target, creds, err := o.target()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(connectParams),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin API %s: %w", target, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	done := func() { cancel(); conn.Close() }
	if ready {
		if err := waitServing(ctx, conn, target, o.timeout); err != nil {
			done()
			return nil, nil, nil, err
		}
	}
	return sitebootv1.NewSiteBootClient(conn), ctx, done, nil
}

// connectParams retry a socket that is not there yet every few hundred
// milliseconds instead of gRPC's default of a second and more.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
}

// readyPoll is how often the CLI asks a starting appliance whether it is ready.
const readyPoll = 100 * time.Millisecond

// waitServing waits until the appliance's health service says SERVING. It
// fails at once on an answer other than "not yet" (a refused peer, say),
// and at the deadline with what the appliance said about itself.
func waitServing(ctx context.Context, conn *grpc.ClientConn, target string, timeout time.Duration) error {
	hc := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{Service: sitebootv1.SiteBoot_ServiceDesc.ServiceName}
	for {
		resp, err := hc.Check(ctx, req)
		switch {
		case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return nil
		case ctx.Err() != nil:
			return notReady(conn, target, timeout)
		case err != nil && status.Code(err) != codes.Unavailable:
			return err
		}
		select {
		case <-ctx.Done():
			return notReady(conn, target, timeout)
		case <-time.After(readyPoll):
		}
	}
}

// notReady says why waiting failed: the appliance never answered, or it
// answered but did not become ready (and then what it says about itself).
func notReady(conn *grpc.ClientConn, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := sitebootv1.NewSiteBootClient(conn).GetStatus(ctx, &sitebootv1.GetStatusRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return status.Errorf(codes.Unavailable, "connect: no appliance answered at %s within %s", target, timeout)
	}
	return status.Errorf(codes.Unavailable, "the appliance at %s did not become ready within %s: %s", target, timeout, st.GetNotReadyReason())
}

// flagOrEnv is a flag's value, else the environment variable's.
func (o *clientOptions) flagOrEnv(flag, name string) string {
	if flag != "" {
		return flag
	}
	v, _ := o.getenv(name)
	return v
}

func (o *clientOptions) target() (string, credentials.TransportCredentials, error) {
	// Flags before the environment: an explicit --socket wins over an
	// exported SITEBOOT_SERVER, as --server wins over SITEBOOT_SOCKET.
	server := o.server
	if server == "" && o.socket == "" {
		server, _ = o.getenv("SITEBOOT_SERVER")
	}
	if server == "" {
		path, err := filepath.Abs(o.socketPath())
		if err != nil {
			return "", nil, err
		}
		if err := socketAccess(path); err != nil {
			return "", nil, err
		}
		return "unix://" + path, insecure.NewCredentials(), nil
	}
	ca, cert, key := o.flagOrEnv(o.tlsCA, "SITEBOOT_TLS_CA"), o.flagOrEnv(o.tlsCert, "SITEBOOT_TLS_CERT"), o.flagOrEnv(o.tlsKey, "SITEBOOT_TLS_KEY")
	if ca == "" || cert == "" || key == "" {
		return "", nil, errors.New("--server needs --tls-ca, --tls-cert and --tls-key (mutual TLS; or SITEBOOT_TLS_CA, SITEBOOT_TLS_CERT, SITEBOOT_TLS_KEY)")
	}
	conf, err := clientTLS(ca, cert, key)
	if err != nil {
		return "", nil, err
	}
	return server, credentials.NewTLS(conf), nil
}

// socketAccess fails at once when the socket exists but this user may not
// connect to it: waiting would not help. A socket that does not exist yet
// is waited for (the appliance may be starting).
func socketAccess(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return nil
	}
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("admin socket %s: permission denied: it admits root and members of the admin group (admin.group)", path)
	}
	return nil
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate found", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// errorLine turns an error into the one line printed on stderr.
func errorLine(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := st.Message()
	// The hints are about this client's own connection, whose errors gRPC
	// makes here and words with these prefixes (and notReady with
	// "connect:"). A status the appliance sends back can hold the same
	// words (a follower's forward to the leader over TLS, a relay it cannot
	// reach, an https origin) and is printed as it is.
	own := (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded) &&
		(strings.HasPrefix(msg, "latest balancer error: ") || strings.HasPrefix(msg, "connection error: ") || strings.HasPrefix(msg, "connect: "))
	unreachable := own && (strings.Contains(msg, "connect:") || strings.Contains(msg, "no such file"))
	switch {
	case own && (strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: unknown certificate authority") ||
		strings.Contains(msg, "tls: bad certificate")):
		// Go's client offers no certificate the server's CA list does not
		// name, so a certificate of the wrong CA arrives as none at all.
		return "the appliance refused the client certificate: " + msg +
			" (--tls-cert must be issued by a CA in the appliance's admin.tls.client_ca)"
	case own && strings.HasPrefix(msg, "latest balancer error: write tcp ") &&
		(strings.HasSuffix(msg, ": broken pipe") || strings.HasSuffix(msg, ": connection reset by peer")):
		// Under TLS 1.3 the client's handshake ends before the server has
		// checked its certificate; the client writes at once, and when the
		// server has refused it and closed, the reset can overtake the alert.
		// Over TCP every connection is mutual TLS, so this is the likely cause.
		return "the appliance closed the connection right after the TLS handshake: " + msg +
			" (most likely it refused the client certificate: --tls-cert must be issued by a CA in the appliance's admin.tls.client_ca)"
	case own && strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return "the appliance's certificate is not trusted: " + msg + " (--tls-ca must hold the CA that issued admin.tls.cert)"
	case own && (strings.Contains(msg, "x509: certificate is valid for") || strings.Contains(msg, "x509: cannot validate certificate")):
		return "the appliance's certificate does not name the address dialled: " + msg + " (dial an address its certificate names)"
	case unreachable:
		return "cannot reach the appliance: " + msg + " (is 'siteboot serve' running? see --socket / SITEBOOT_SOCKET)"
	case st.Code() == codes.DeadlineExceeded:
		return "the appliance did not answer in time: " + msg
	}
	return msg + " (" + st.Code().String() + ")"
}

// call dials the appliance, waits until it is ready, makes one call and
// prints its response: as protojson with -o json, with table otherwise.
func call[T proto.Message](cmd *cobra.Command, cl *clientOptions, rpc func(context.Context, sitebootv1.SiteBootClient) (T, error), table func(io.Writer, T) error) error {
	return callWith(cmd, cl, true, rpc, table)
}

// callStarting is call for an RPC that answers while the appliance starts:
// it waits for the connection only.
func callStarting[T proto.Message](cmd *cobra.Command, cl *clientOptions, rpc func(context.Context, sitebootv1.SiteBootClient) (T, error), table func(io.Writer, T) error) error {
	return callWith(cmd, cl, false, rpc, table)
}

func callWith[T proto.Message](cmd *cobra.Command, cl *clientOptions, ready bool, rpc func(context.Context, sitebootv1.SiteBootClient) (T, error), table func(io.Writer, T) error) error {
	api, ctx, done, err := cl.connect(cmd.Context(), ready)
	if err != nil {
		return err
	}
	defer done()
	resp, err := rpc(ctx, api)
	if err != nil {
		return err
	}
	if cl.output == "json" {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	return table(cmd.OutOrStdout(), resp)
}
