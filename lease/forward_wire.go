package lease

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The forward protocol runs on the raft port, beside raft's own
// connections. A forward connection opens with forwardMagic; raft's
// connections open with an rpc type (0 to 4), so the first byte tells them
// apart. Then the follower sends requests and the leader answers each
// before the next is read:
//
//	request:  op u8 | timeout_ms u32 | len u32 | payload
//	response: status u8 | index u64 | len u32 | message
//
// All integers are big-endian. An apply carries a serialized LogEntry, a
// membership change the raft address; a response carries the log index of
// the change, and a message: the leader's address (statusNotLeader) or the
// error (statusFailed, statusUnknown).
const (
	forwardMagic = "SBF1"
	// maxForwardPayload bounds a request: the admin API's largest request
	// and the log entry around it.
	maxForwardPayload = 6 << 20
	// maxForwardMessage bounds a response's message.
	maxForwardMessage = 1024
	// maxForwardTimeout bounds the time budget a request may ask for.
	maxForwardTimeout = time.Minute
)

type forwardOp uint8

const (
	opApply        forwardOp = 1 // payload: a serialized LogEntry
	opAddVoter     forwardOp = 2 // payload: the raft address to add
	opRemoveServer forwardOp = 3 // payload: the raft address to remove
)

type forwardStatus uint8

const (
	statusOK        forwardStatus = 0
	statusNotLeader forwardStatus = 1 // message: the leader's address, or empty
	statusFailed    forwardStatus = 2 // message: the error
	statusUnknown   forwardStatus = 3 // appended but not confirmed (leadership lost); message: the error
)

type forwardRequest struct {
	op      forwardOp
	timeout time.Duration
	payload []byte
}

type forwardResponse struct {
	status  forwardStatus
	index   uint64
	message string
}

// errForwardFormat: bytes that are no forward request or response.
var errForwardFormat = errors.New("lease: forward protocol")

func (r forwardRequest) encode() ([]byte, error) {
	if r.op < opApply || r.op > opRemoveServer {
		return nil, fmt.Errorf("%w: op %d", errForwardFormat, r.op)
	}
	if len(r.payload) > maxForwardPayload {
		return nil, fmt.Errorf("%w: request of %d bytes; the limit is %d", errForwardFormat, len(r.payload), maxForwardPayload)
	}
	ms := min(max(r.timeout, time.Millisecond), maxForwardTimeout).Milliseconds()
	b := make([]byte, 9, 9+len(r.payload))
	b[0] = byte(r.op)
	binary.BigEndian.PutUint32(b[1:5], uint32(ms))
	binary.BigEndian.PutUint32(b[5:9], uint32(len(r.payload)))
	return append(b, r.payload...), nil
}

// readRequest reads one request; a payload over the limit is refused
// before it is read.
func readRequest(r io.Reader) (forwardRequest, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return forwardRequest{}, err
	}
	req := forwardRequest{op: forwardOp(h[0])}
	if req.op < opApply || req.op > opRemoveServer {
		return forwardRequest{}, fmt.Errorf("%w: unknown op %d", errForwardFormat, h[0])
	}
	ms := binary.BigEndian.Uint32(h[1:5])
	if ms == 0 || time.Duration(ms)*time.Millisecond > maxForwardTimeout {
		return forwardRequest{}, fmt.Errorf("%w: timeout %d ms; it is 1 to %d", errForwardFormat, ms, maxForwardTimeout.Milliseconds())
	}
	req.timeout = time.Duration(ms) * time.Millisecond
	n := binary.BigEndian.Uint32(h[5:9])
	if n > maxForwardPayload {
		return forwardRequest{}, fmt.Errorf("%w: request of %d bytes; the limit is %d", errForwardFormat, n, maxForwardPayload)
	}
	// Memory grows with the bytes that arrive, not with the length the
	// peer claims.
	var payload bytes.Buffer
	if _, err := io.CopyN(&payload, r, int64(n)); err != nil {
		return forwardRequest{}, fmt.Errorf("%w: truncated request: %v", errForwardFormat, err)
	}
	req.payload = payload.Bytes()
	return req, nil
}

func (r forwardResponse) encode() []byte {
	msg := clipBytes(r.message, maxForwardMessage)
	b := make([]byte, 13, 13+len(msg))
	b[0] = byte(r.status)
	binary.BigEndian.PutUint64(b[1:9], r.index)
	binary.BigEndian.PutUint32(b[9:13], uint32(len(msg)))
	return append(b, msg...)
}

func readResponse(r io.Reader) (forwardResponse, error) {
	var h [13]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return forwardResponse{}, err
	}
	resp := forwardResponse{status: forwardStatus(h[0]), index: binary.BigEndian.Uint64(h[1:9])}
	if resp.status > statusUnknown {
		return forwardResponse{}, fmt.Errorf("%w: unknown status %d", errForwardFormat, h[0])
	}
	n := binary.BigEndian.Uint32(h[9:13])
	if n > maxForwardMessage {
		return forwardResponse{}, fmt.Errorf("%w: message of %d bytes; the limit is %d", errForwardFormat, n, maxForwardMessage)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return forwardResponse{}, fmt.Errorf("%w: truncated response: %v", errForwardFormat, err)
	}
	resp.message = string(msg)
	return resp, nil
}

// clipBytes cuts s to at most n bytes.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
