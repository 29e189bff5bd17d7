package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// insecureInfo is what credentials/insecure reports for a plain connection.
type insecureInfo struct{ credentials.CommonAuthInfo }

func (insecureInfo) AuthType() string { return "insecure" }

// The check admits only identities a listener proved, and refuses the rest.
func TestCheckFailsClosed(t *testing.T) {
	s := &Server{cfg: Config{Logger: slog.New(slog.DiscardHandler), AdminGID: 998, AdminGroup: "siteboot"}}
	verified := credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}}
	tests := []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"no peer", context.Background(), codes.PermissionDenied},
		{"peer without auth info", peer.NewContext(context.Background(), &peer.Peer{}), codes.PermissionDenied},
		{"plain connection", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: insecureInfo{}}), codes.PermissionDenied},
		{"TLS without a verified client certificate", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}), codes.PermissionDenied},
		{"TLS with a verified client certificate", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: verified}), codes.OK},
		{"socket peer root", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: PeerCred{UID: 0}}), codes.OK},
		{"socket peer in the group", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: PeerCred{UID: 1000, GID: 5, Groups: []uint32{998}}}), codes.OK},
		{"socket peer outside", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: PeerCred{UID: 1000, GID: 1000}}), codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(s.check(tt.ctx)); got != tt.want {
				t.Fatalf("check = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPeerCredAllowed(t *testing.T) {
	tests := []struct {
		pc   PeerCred
		gid  int
		want bool
	}{
		{PeerCred{UID: 0, GID: 5}, -1, true},
		{PeerCred{UID: 1000, GID: 1000}, -1, false},
		{PeerCred{UID: 1000, GID: 1000}, 1000, true},
		{PeerCred{UID: 1000, GID: 1000, Groups: []uint32{27, 998}}, 998, true},
		{PeerCred{UID: 1000, GID: 1000, Groups: []uint32{27}}, 998, false},
	}
	for _, tt := range tests {
		if got := tt.pc.Allowed(tt.gid); got != tt.want {
			t.Errorf("%+v.Allowed(%d) = %t, want %t", tt.pc, tt.gid, got, tt.want)
		}
	}
}
