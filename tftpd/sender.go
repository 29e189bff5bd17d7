package tftpd

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/pin/tftp/v3/netascii"
)

// netasciiReader converts a file to netascii (RFC 1350: CR LF line ends,
// CR NUL for a bare CR) with pin/tftp's converter.
func netasciiReader(r io.Reader) io.Reader { return netascii.ToReader(r) }

// sender sends one file in lock step (RFC 1350): a DATA block, then wait
// for its ACK, sending it again after each Timeout up to Retries sends in
// all. Datagrams from any other address or port than the client's are
// ignored, as are ACKs of earlier blocks (sending again on those is the
// Sorcerer's Apprentice bug).
type sender struct {
	conn    *net.UDPConn
	to      *net.UDPAddr
	timeout time.Duration
	retries int
	blksize int
	confirm func() // called on the client's first acknowledgement

	sent, acked int   // datagrams, for the log line
	cause       error // the read error behind errReadSource
	rbuf        [maxRequest]byte
}

// errQuiet is a client that acknowledged nothing within Timeout×Retries.
var errQuiet = &net.OpError{Op: "read", Net: "udp", Err: os.ErrDeadlineExceeded}

// run sends the OACK (if oack is not nil) and then the file. It stops
// before the next block once done is closed, telling the client.
func (x *sender) run(done <-chan struct{}, r io.Reader, oack []string) (int64, error) {
	if oack != nil {
		if err := x.exchange(oackPacket(oack), 0); err != nil {
			return 0, err
		}
	}
	pkt := make([]byte, 4+x.blksize)
	binary.BigEndian.PutUint16(pkt, opDATA)
	var n int64
	for block := uint16(1); ; block++ {
		select {
		case <-done:
			x.abort(errStopping)
			return n, errStopping
		default:
		}
		l, err := io.ReadFull(r, pkt[4:])
		if err != nil && err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
			x.cause = err
			x.abort(errReadSource)
			return n, errReadSource
		}
		binary.BigEndian.PutUint16(pkt[2:], block) // wraps to 0 after 65535, as clients expect
		if err := x.exchange(pkt[:4+l], block); err != nil {
			return n, err
		}
		n += int64(l)
		if l < x.blksize {
			return n, nil
		}
	}
}

// exchange sends p until the client acknowledges block.
func (x *sender) exchange(p []byte, block uint16) error {
	for range x.retries {
		if _, err := x.conn.WriteToUDP(p, x.to); err != nil {
			return err
		}
		x.sent++
		err := x.await(block)
		if err == nil {
			if x.acked++; x.acked == 1 && x.confirm != nil {
				x.confirm()
			}
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
	return errQuiet
}

// await reads until the ACK of block, an ERROR from the client or the
// timeout.
func (x *sender) await(block uint16) error {
	if err := x.conn.SetReadDeadline(time.Now().Add(x.timeout)); err != nil {
		return err
	}
	for {
		n, from, err := x.conn.ReadFromUDP(x.rbuf[:])
		if err != nil {
			return err
		}
		if n < 4 || from.Port != x.to.Port || !from.IP.Equal(x.to.IP) {
			continue
		}
		switch binary.BigEndian.Uint16(x.rbuf[:]) {
		case opACK:
			if binary.BigEndian.Uint16(x.rbuf[2:]) == block {
				return nil
			}
		case opERROR:
			return parseClientError(x.rbuf[:n])
		}
	}
}

// abort tells the client why the transfer ends; the client may be gone,
// so a failure to send is not reported.
func (x *sender) abort(why error) {
	_, _ = x.conn.WriteToUDP(errorPacket(why.Error()), x.to)
}
