package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
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
	f.StringVar(&o.tlsCA, "tls-ca", "", "CA bundle that signed the server's certificate (with --server)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "client certificate (with --server)")
	f.StringVar(&o.tlsKey, "tls-key", "", "client key (with --server)")
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

// dial connects to the appliance and returns the client, a context bounded
// by --timeout, and a function that releases both.
func (o *clientOptions) dial(ctx context.Context) (sitebootv1.SiteBootClient, context.Context, func(), error) {
	if o.output != "table" && o.output != "json" {
		return nil, nil, nil, fmt.Errorf("--output %q: want table or json", o.output)
	}
	target, creds, err := o.target()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin API %s: %w", target, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	return sitebootv1.NewSiteBootClient(conn), ctx, func() { cancel(); conn.Close() }, nil
}

func (o *clientOptions) target() (string, credentials.TransportCredentials, error) {
	server := o.server
	if server == "" {
		server, _ = o.getenv("SITEBOOT_SERVER")
	}
	if server == "" {
		path, err := filepath.Abs(o.socketPath())
		if err != nil {
			return "", nil, err
		}
		return "unix://" + path, insecure.NewCredentials(), nil
	}
	if o.tlsCA == "" || o.tlsCert == "" || o.tlsKey == "" {
		return "", nil, errors.New("--server needs --tls-ca, --tls-cert and --tls-key (mutual TLS)")
	}
	conf, err := clientTLS(o.tlsCA, o.tlsCert, o.tlsKey)
	if err != nil {
		return "", nil, err
	}
	return server, credentials.NewTLS(conf), nil
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
	switch st.Code() {
	case codes.Unavailable:
		if strings.Contains(msg, "connect:") || strings.Contains(msg, "no such file") {
			return "cannot reach the appliance: " + msg + " (is 'siteboot serve' running? see --socket / SITEBOOT_SOCKET)"
		}
	case codes.DeadlineExceeded:
		return "the appliance did not answer in time: " + msg
	}
	return msg + " (" + st.Code().String() + ")"
}

// call dials the appliance, makes one call and prints its response: as
// protojson with -o json, with table otherwise.
func call[T proto.Message](cmd *cobra.Command, cl *clientOptions, rpc func(context.Context, sitebootv1.SiteBootClient) (T, error), table func(io.Writer, T) error) error {
	api, ctx, done, err := cl.dial(cmd.Context())
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
