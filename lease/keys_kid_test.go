package lease_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
)

// TestKeysCarryTheSignersKID: a published key's KID is the kid the
// discovery signer puts on its assertions, so /v1/keys matches them.
func TestKeysCarryTheSignersKID(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := lease.Open(lease.Config{Dir: t.TempDir(), ID: "appliance-1", PublicKey: der,
		StateMachine: site.NewState(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		_ = n.Close()
	}()
	var keys []lease.PublicKey
	for end := time.Now().Add(10 * time.Second); len(keys) == 0 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		keys = n.Keys()
	}
	if len(keys) != 1 {
		t.Fatalf("Keys() = %v; want this node's key", keys)
	}
	want, err := discovery.KeyID(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if keys[0].KID != want || !keys[0].Key.Equal(&key.PublicKey) || keys[0].NodeID != "appliance-1" {
		t.Fatalf("Keys()[0] = %+v; want kid %s of the node key", keys[0], want)
	}
}
