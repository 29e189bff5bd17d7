package tftpd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// TFTP opcodes (RFC 1350, RFC 2347).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// maxRequest bounds a request datagram. RFC 2347 allows 512 bytes; twice
// that leaves room for a lax client, and anything longer is malformed.
const maxRequest = 1024

// Block sizes: what RFC 1350 clients get, and RFC 2348's largest.
const (
	minBlockSize = 512
	maxBlockSize = 65464
)

// maxWindowSize is RFC 7440's largest windowsize. maxWindowBytes caps the
// blocks of one window, whatever the block size: the sender keeps a window
// for retransmission until it is acknowledged, so this bounds a
// transfer's memory (64 MiB at DefaultMaxTransfers), and the burst a
// client's receive queue must absorb between two ACKs: firmware polls its
// NIC, and what overflows that queue is lost and must be sent again.
const (
	maxWindowSize  = 65535
	maxWindowBytes = 64 << 10
)

// rqPacket is a parsed RRQ or WRQ.
type rqPacket struct {
	op   uint16
	name string // as sent
	mode string // as sent; anything but netascii is served as octet
	opts map[string]string
}

var errMalformed = errors.New("malformed request")

// parseRequest parses an RRQ or WRQ: opcode, file name, mode and option
// name/value pairs, each NUL-terminated (a missing last NUL is tolerated,
// as pin/tftp did). Option names are kept as sent: "BLKSIZE" is not
// "blksize", which is what this server has always answered.
func parseRequest(p []byte) (rqPacket, error) {
	if len(p) < 4 || len(p) > maxRequest {
		return rqPacket{}, errMalformed
	}
	op := binary.BigEndian.Uint16(p)
	if op != opRRQ && op != opWRQ {
		return rqPacket{}, errMalformed
	}
	fields := bytes.Split(bytes.TrimSuffix(p[2:], []byte{0}), []byte{0})
	if len(fields) < 2 {
		return rqPacket{}, errMalformed
	}
	r := rqPacket{op: op, name: string(fields[0]), mode: string(fields[1])}
	for i := 2; i+1 < len(fields); i += 2 {
		if r.opts == nil {
			r.opts = map[string]string{}
		}
		r.opts[string(fields[i])] = string(fields[i+1])
	}
	return r, nil
}

func (r rqPacket) netascii() bool { return strings.EqualFold(r.mode, "netascii") }

// negotiate picks the options this server acknowledges (RFC 2347): blksize
// capped at blockLimit (RFC 2348; a value below 512 or above 65464 is
// ignored, leaving 512), tsize answered with size (RFC 2349) and
// windowsize (RFC 7440; 1..65535, else ignored, leaving 1) capped at
// windowLimit and at maxWindowBytes of blocks. Everything else is left
// out. It returns the block size, the window and the OACK's options, nil
// when no OACK is due.
func (r rqPacket) negotiate(blockLimit, windowLimit int, size int64) (blksize, window int, oack []string) {
	blksize, window = minBlockSize, 1
	if v, ok := r.opts["blksize"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= minBlockSize && n <= maxBlockSize {
			blksize = min(n, blockLimit)
			oack = append(oack, "blksize", strconv.Itoa(blksize))
		}
	}
	if _, ok := r.opts["tsize"]; ok {
		oack = append(oack, "tsize", strconv.FormatInt(size, 10))
	}
	if v, ok := r.opts["windowsize"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= maxWindowSize {
			window = min(n, windowLimit, max(1, maxWindowBytes/blksize))
			oack = append(oack, "windowsize", strconv.Itoa(window))
		}
	}
	return blksize, window, oack
}

func oackPacket(kv []string) []byte {
	b := []byte{0, opOACK}
	for _, s := range kv {
		b = append(append(b, s...), 0)
	}
	return b
}

// errorPacket is an ERROR with code 1 and msg. Every refusal carries code
// 1 ("file not found"), as the server always has; the message says what
// happened.
func errorPacket(msg string) []byte {
	return append(append([]byte{0, opERROR, 0, 1}, msg...), 0)
}

// clientError is an ERROR packet a client sent.
type clientError struct {
	code uint16
	msg  string
}

func (e *clientError) Error() string {
	return "client sent ERROR " + strconv.Itoa(int(e.code)) + ": " + strconv.Quote(e.msg)
}

func parseClientError(p []byte) *clientError {
	return &clientError{code: binary.BigEndian.Uint16(p[2:4]), msg: string(bytes.TrimRight(p[4:], "\x00"))}
}
