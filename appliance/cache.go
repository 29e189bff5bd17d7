package appliance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/siteboot/siteboot/imagecache"
)

// buildCache opens the image cache in <data_dir>/cache.
func (a *Appliance) buildCache(context.Context) error {
	capacity, _ := parseSize(a.cfg.Cache.Capacity)
	minFree, _ := parseSize(a.cfg.Cache.MinFree)
	checkpoint, _ := parseSize(a.cfg.Cache.Checkpoint)
	client, err := originClient(a.cfg.Cache.CABundle)
	if err != nil {
		return err
	}
	a.pins = &pins{}
	if err := a.pins.setRamdisk(a.cfg.Ramdisk.Kernel, a.cfg.Ramdisk.Initrd); err != nil {
		return err
	}
	c, err := imagecache.Open(imagecache.Config{
		Dir: filepath.Join(a.cfg.DataDir, "cache"), Capacity: capacity, MinFree: minFree,
		Concurrency: a.cfg.Cache.Concurrency, CheckpointBytes: checkpoint, HTTPClient: client, Now: time.Now,
		Logger: a.log, Metrics: a.reg, Pins: a.pins,
	})
	if err != nil {
		return err
	}
	a.cache = c
	a.onClose(c.Close)
	return nil
}

// originClient verifies TLS against the system roots plus an optional
// bundle. It sets no overall timeout: a big pull takes long; the cache
// aborts stalled transfers itself.
func originClient(caBundle string) (*http.Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if caBundle != "" {
		pem, err := os.ReadFile(caBundle)
		if err != nil {
			return nil, fmt.Errorf("cache.ca_bundle: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cache.ca_bundle %s: no PEM certificate found", caBundle)
		}
	}
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		ForceAttemptHTTP2:   true,
	}
	return &http.Client{Transport: t}, nil
}

// syncImages hands the replicated wanted images to the cache and refreshes
// the pins (entries' sanboot digests and the ramdisk profile).
func (a *Appliance) syncImages() error {
	a.pins.setEntries(a.state.SanbootDigests())
	var ws []imagecache.Want
	for _, w := range a.state.WantedImages() {
		want, err := imagecache.FromCacheImage(w.GetImage())
		if err != nil {
			return err
		}
		want.Compression, want.SourceSHA256 = w.GetCompression(), w.GetSourceSha256()
		ws = append(ws, want)
	}
	return a.cache.SetWanted(ws)
}

// pins are the images the cache must keep: what entries sanboot and what
// the ramdisk profile loads from the cache.
type pins struct {
	entries atomic.Pointer[map[[32]byte]struct{}]
	ramdisk map[[32]byte]struct{}
}

func (p *pins) setEntries(m map[[32]byte]struct{}) { p.entries.Store(&m) }

func (p *pins) setRamdisk(refs ...string) error {
	p.ramdisk = make(map[[32]byte]struct{})
	for _, ref := range refs {
		h, ok := strings.CutPrefix(ref, "sha256:")
		if !ok {
			continue
		}
		d, err := imagecache.ParseDigest(strings.ToLower(h))
		if err != nil {
			return fmt.Errorf("ramdisk: %q: %w", ref, err)
		}
		p.ramdisk[d] = struct{}{}
	}
	return nil
}

// Pinned implements imagecache.Pinner.
func (p *pins) Pinned(d [32]byte) bool {
	if _, ok := p.ramdisk[d]; ok {
		return true
	}
	if m := p.entries.Load(); m != nil {
		_, ok := (*m)[d]
		return ok
	}
	return false
}
