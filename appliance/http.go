package appliance

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/images"
)

// httpMux routes the appliance's HTTP surface: scripts, boot files, the
// image cache, health, readiness, the site's public keys and metrics.
func (a *Appliance) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	scripts := a.script.Handler()
	mux.Handle("/boot.ipxe", scripts)
	mux.Handle("/ipxe", scripts)
	mux.Handle(images.HTTPPrefix, a.boot.Handler())
	mux.Handle(imagecache.PathPrefix, a.cache.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /v1/keys", a.serveKeys)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	return mux
}

func (a *Appliance) readyz(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-a.node.Ready():
	default:
		http.Error(w, "not ready: the replicated state is not restored yet (raft "+a.node.RaftState()+")", http.StatusServiceUnavailable)
		return
	}
	epoch, open := a.node.Gate()
	fmt.Fprintf(w, "ready: lease active=%t epoch=%d\n", open, epoch)
}
