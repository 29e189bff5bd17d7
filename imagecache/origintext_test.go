package imagecache

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"testing"
)

// rawOrigin answers every request on loopback with reply, then closes.
func rawOrigin(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			for { // the request head
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String() + "/img"
}

// What an origin writes into its status line or headers reaches the
// failure reason, the logs and index.json only clipped: a hostile origin
// cannot make the cache keep or log megabytes of its text.
func TestOriginTextInReasonsIsBounded(t *testing.T) {
	long := strings.Repeat("x", 256<<10)
	for _, tc := range []struct{ name, reply string }{
		{"reason phrase", "HTTP/1.1 404 " + long + "\r\nContent-Length: 0\r\n\r\n"},
		{"retried reason phrase", "HTTP/1.1 503 " + long + "\r\nContent-Length: 0\r\n\r\n"},
		{"malformed status line", "HTTP/1.1 " + long + "\r\n\r\n"},
		{"malformed header", "HTTP/1.1 200 OK\r\n" + long + "\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := testBytes(92, 1000)
			d := digestOf(data)
			cfg := testConfig(t)
			c := openCache(t, cfg)
			runCache(t, c)
			if err := c.Add(Want{URL: rawOrigin(t, tc.reply), SHA256: d}); err != nil {
				t.Fatal(err)
			}
			reason := waitFailed(t, c, d)
			if len(reason) > 1024 {
				t.Errorf("reason is %d bytes long: %.100q…", len(reason), reason)
			}
			if err := c.persist(); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(c.indexPath()); err != nil || fi.Size() > 4096 {
				t.Errorf("index.json: %v, %d bytes", err, fi.Size())
			}
		})
	}
}
