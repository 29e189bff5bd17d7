package appliance

import (
	"crypto/ecdsa"
	"net/http"
	"strconv"

	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/lease"
)

// memberKey is one site member's public key as the lease node reports it:
// the member keys it publishes through the raft log.
type memberKey = lease.PublicKey

// keySource lists the public keys of the site's members.
type keySource interface {
	Keys() []memberKey
}

// memberKeys is the key set of the site: siteKeys of this appliance's node
// key and the lease node's member keys (once it reports them).
func (a *Appliance) memberKeys() (*discovery.KeySet, error) {
	return siteKeys(a.signer.Public(), a.node)
}

// siteKeys is every key src reports, and always own (so this appliance's
// assertions verify also before its key went through the log); src may be
// nil. A key reported twice is listed once.
func siteKeys(own *ecdsa.PublicKey, src keySource) (*discovery.KeySet, error) {
	pubs := []*ecdsa.PublicKey{own}
	if src != nil {
		for _, k := range src.Keys() {
			if k.Key != nil {
				pubs = append(pubs, k.Key)
			}
		}
	}
	return discovery.NewKeySet(pubs...)
}

// serveKeys is GET /v1/keys: the JWKS of the site's members, public keys
// only. It is the same for every caller and changes only when membership
// does.
func (a *Appliance) serveKeys(w http.ResponseWriter, _ *http.Request) {
	set, err := a.memberKeys()
	var body []byte
	if err == nil {
		body, err = set.MarshalJWKS()
	}
	if err != nil {
		a.log.Error("http: /v1/keys", "err", err)
		http.Error(w, "the key set cannot be encoded", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jwk-set+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(body)
}
