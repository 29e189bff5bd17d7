package httpserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A request that announces a body and never sends it is answered at once
// and its connection closed within ReadHeaderTimeout: net/http would
// otherwise wait for the body without a deadline, before the answer and
// again after the handler, so a client sending nothing would hold its
// connection (and whatever the handler holds) for ever.
func TestAnnouncedBodyThatNeverComes(t *testing.T) {
	const headTimeout = 300 * time.Millisecond
	returned := make(chan struct{}, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer func() { returned <- struct{}{} }()
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})
	s, addr := serve(t, Config{ReadHeaderTimeout: headTimeout}, h)
	for _, tc := range []struct{ name, head string }{
		{"content-length", "Content-Length: 10\r\n"},
		{"chunked", "Transfer-Encoding: chunked\r\n"},
		{"expect 100-continue", "Content-Length: 10\r\nExpect: 100-continue\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			conn.SetDeadline(start.Add(headTimeout + 3*time.Second))
			if _, err := io.WriteString(conn, "GET /cache/x HTTP/1.1\r\nHost: x\r\n"+tc.head+"\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer after %v: %v", time.Since(start), err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != "ok" || resp.StatusCode != 200 {
				t.Fatalf("answer %d %q, %v; want 200 \"ok\"", resp.StatusCode, body, err)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after the answer: %v after %v; want the server to close the connection", err, time.Since(start))
			}
			if took := time.Since(start); took > headTimeout+2*time.Second {
				t.Errorf("connection closed after %v; want within about %v", took, headTimeout)
			}
			<-returned
			waitFor(t, func() bool { return s.open.Load() == 0 })
		})
	}
}
