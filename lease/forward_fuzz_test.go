package lease

import (
	"bytes"
	"testing"
	"time"
)

// FuzzForwardRequest feeds arbitrary bytes to the leader's request
// decoder: it must never panic nor hold more than the limit, and what it
// accepts encodes back to the bytes it read.
func FuzzForwardRequest(f *testing.F) {
	ok, _ := forwardRequest{op: opApply, timeout: time.Second, payload: []byte("entry")}.encode()
	f.Add(ok)
	add, _ := forwardRequest{op: opAddVoter, timeout: time.Minute, payload: []byte("10.0.0.2:7390")}.encode()
	f.Add(add)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{9, 0, 0, 3, 0xe8, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readRequest(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(req.payload) > maxForwardPayload || req.timeout <= 0 || req.timeout > maxForwardTimeout {
			t.Fatalf("accepted %d bytes, timeout %s", len(req.payload), req.timeout)
		}
		again, err := req.encode()
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		if !bytes.HasPrefix(data, again) {
			t.Fatalf("request re-encodes as %x; read from %x", again, data)
		}
	})
}

// FuzzForwardResponse does the same for the follower's response decoder.
func FuzzForwardResponse(f *testing.F) {
	f.Add(forwardResponse{status: statusOK, index: 42}.encode())
	f.Add(forwardResponse{status: statusNotLeader, message: "10.0.0.3:7390"}.encode())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := readResponse(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(resp.message) > maxForwardMessage || resp.status > statusUnknown {
			t.Fatalf("accepted %+v", resp)
		}
		if again := resp.encode(); !bytes.HasPrefix(data, again) {
			t.Fatalf("response re-encodes as %x; read from %x", again, data)
		}
	})
}
