package httpproxy

// This file is the fixture's target server, not a test of its own: it
// records what each request looked like and serves the paths the tests in
// proxy_test.go and the others ask for; those tests assert on what it saw.

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// targetServer is the handler of both fixture targets.
type targetServer struct {
	f    *fixture
	done chan struct{} // closed at cleanup: blocked handlers return

	mu       sync.Mutex
	requests []seenRequest
	endless  chan int64 // bytes written by /endless when the client went away
	release  chan struct{}
	entered  chan struct{}
	stopOnce sync.Once
}

// seenRequest is what the target saw of one request.
type seenRequest struct {
	Method, Path, Host string
	Header             http.Header
	Body               string
}

func newTargetServer(f *fixture) *targetServer {
	return &targetServer{f: f, done: make(chan struct{}), endless: make(chan int64, 1),
		release: make(chan struct{}), entered: make(chan struct{}, 4)}
}

func (s *targetServer) stop() { s.stopOnce.Do(func() { close(s.done) }) }

func (s *targetServer) seen() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.requests...)
}

func (s *targetServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, seenRequest{r.Method, r.URL.Path, r.Host, r.Header.Clone(), string(body)})
	s.mu.Unlock()
	switch r.URL.Path {
	case "/redirect-other":
		w.Header().Set("Location", s.f.u("https://"+ipOther+":{P}/"))
		w.WriteHeader(http.StatusFound)
	case "/redirect-self":
		w.Header().Set("Location", "/final")
		w.WriteHeader(http.StatusTemporaryRedirect)
	case "/big":
		w.Write([]byte(strings.Repeat("b", int(s.f.config(nil).MaxResponseBytes)+100)))
	case "/endless":
		s.writeEndless(w)
	case "/slow-body":
		w.Write([]byte("first bytes"))
		w.(http.Flusher).Flush()
		s.wait(r)
	case "/slow-headers":
		s.wait(r)
	case "/echo-body":
		r.Header.Write(w)
	case "/echo-header":
		for k, vs := range r.Header {
			for _, v := range vs {
				w.Header().Add("X-Echo-"+k, v)
			}
		}
	case "/upgrade-silent":
		s.upgradeSilent(w)
	case "/block":
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-s.done:
		}
		w.Write([]byte("released"))
	default:
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("X-Target", "ok")
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}
}

// wait blocks until the client went away or the fixture ends.
func (s *targetServer) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	case <-time.After(30 * time.Second):
	}
}

// writeEndless writes until a write fails (the proxy closed the
// connection) and reports how much it wrote.
func (s *targetServer) writeEndless(w http.ResponseWriter) {
	chunk := []byte(strings.Repeat("e", 8192))
	var n int64
	for {
		m, err := w.Write(chunk)
		n += int64(m)
		if err != nil {
			break
		}
		select {
		case <-s.done:
			return
		default:
		}
	}
	s.endless <- n
}

// upgradeSilent answers 101 Switching Protocols, which hands the raw
// connection to the client, and then sends nothing until the client closes
// the connection or the fixture ends.
func (s *targetServer) upgradeSilent(w http.ResponseWriter) {
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: silence\r\n\r\n")
	brw.Flush()
	closed := make(chan struct{})
	go func() { io.Copy(io.Discard, conn); close(closed) }()
	select {
	case <-closed:
	case <-s.done:
	case <-time.After(30 * time.Second):
	}
}
