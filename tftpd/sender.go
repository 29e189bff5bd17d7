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

// sender sends one file in windows of DATA blocks (RFC 7440; a window of
// one is RFC 1350's lock step): up to window blocks from the first one not
// acknowledged, then it waits. An ACK of any block of the window
// acknowledges it and every block before it, and the next window starts
// right after it, so a client that missed a block gets it again at once.
// A client that missed the window's first block acknowledges the block
// before the window again (RFC 7440 §4; edk2 does so for every block that
// is not the one it expects): the window is sent again at once, once per
// window. The repeats a client sends for the blocks it got after a gap in
// the window before are expected and skipped first. Every other ACK of a
// block already acknowledged is ignored (sending again on each is the
// Sorcerer's Apprentice bug), and in lock step (a window of one) all are,
// as RFC 1350 servers do. Without such an ACK the window is sent again after
// each Timeout, up to Retries sends in all. Datagrams from any other
// address or port than the client's are ignored.
type sender struct {
	conn    *net.UDPConn
	to      *net.UDPAddr
	timeout time.Duration
	retries int
	blksize int
	window  int    // DATA packets sent before waiting for an ACK
	confirm func() // called on the client's first acknowledgement

	sent, acked int   // datagrams sent, ACKs that moved the transfer on: for the log line
	cause       error // the read error behind errReadSource
	rbuf        [maxRequest]byte
}

// errQuiet is a client that acknowledged nothing within Timeout×Retries.
var errQuiet = &net.OpError{Op: "read", Net: "udp", Err: os.ErrDeadlineExceeded}

// run sends the OACK (if oack is not nil) and then the file. It stops
// before the next window once done is closed, telling the client.
func (x *sender) run(done <-chan struct{}, r io.Reader, oack []string) (int64, error) {
	if oack != nil {
		if _, err := x.exchange([][]byte{oackPacket(oack)}, 0, false, 0); err != nil {
			return 0, err
		}
	}
	// Block b (counted from 1, without wrapping) is read into slot
	// b%window of buf and kept in win until the client acknowledges it:
	// the only copy of the file a transfer holds.
	slot := 4 + x.blksize
	buf := make([]byte, x.window*slot)
	win := make([][]byte, 0, x.window)
	var n int64
	eof := false // the last block, shorter than blksize, has been read
	repeats := 0 // ACKs of base-1 still expected for blocks after a gap
	for base := 1; ; {
		select {
		case <-done:
			x.abort(errStopping)
			return n, errStopping
		default:
		}
		for len(win) < x.window && !eof {
			b := base + len(win)
			p := buf[b%x.window*slot:][:slot]
			l, err := io.ReadFull(r, p[4:])
			if err != nil && err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
				x.cause = err
				x.abort(errReadSource)
				return n, errReadSource
			}
			binary.BigEndian.PutUint16(p, opDATA)
			binary.BigEndian.PutUint16(p[2:], uint16(b)) // wraps to 0 after 65535, as clients expect
			win = append(win, p[:4+l])
			eof = l < x.blksize
		}
		k, err := x.exchange(win, uint16(base), true, repeats)
		if err != nil {
			return n, err
		}
		// An ACK within the window says the client missed block base+k;
		// edk2 acknowledges base+k-1 again for each later block of this
		// window it gets.
		repeats = len(win) - k - 1
		for _, p := range win[:k] {
			n += int64(len(p) - 4)
		}
		base += k
		win = append(win[:0], win[k:]...)
		if eof && len(win) == 0 {
			return n, nil
		}
	}
}

// exchange sends pkts, the packets of blocks first, first+1 and on (the
// OACK is block 0), until the client acknowledges one of them, and
// returns how many of them that acknowledges. data says pkts is a window
// of DATA, not the OACK; the first skip ACKs of first-1 are the client's
// repeats for an earlier gap.
func (x *sender) exchange(pkts [][]byte, first uint16, data bool, skip int) (int, error) {
	// A repeated ACK of first-1 beyond skip sends the window again at
	// once, once: it does not count as one of Retries.
	missed := data && x.window > 1
	for try := 0; try < x.retries; try++ {
		for _, p := range pkts {
			if _, err := x.conn.WriteToUDP(p, x.to); err != nil {
				return 0, err
			}
			x.sent++
		}
		k, err := x.await(first, len(pkts), missed, &skip)
		switch {
		case err == nil:
			if x.acked++; x.acked == 1 && x.confirm != nil {
				x.confirm()
			}
			return k, nil
		case err == errMissedFirst:
			missed, try = false, try-1
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return 0, err
		}
	}
	return 0, errQuiet
}

// errMissedFirst is an ACK of the block before the window: the client
// missed the window's first block.
var errMissedFirst = errors.New("client missed the window's first block")

// await reads until an ACK of one of the count blocks from first on, an
// ERROR from the client or the timeout, and returns how many of the count
// blocks the ACK acknowledges. Block numbers wrap, so an ACK is placed by
// its distance ahead of first modulo 2^16: an ACK of first-1 or of a block
// before it comes out near 65535, far beyond count (at most 64). With
// missed, an ACK of first-1 is errMissedFirst once *skip of them have
// been counted down.
func (x *sender) await(first uint16, count int, missed bool, skip *int) (int, error) {
	if err := x.conn.SetReadDeadline(time.Now().Add(x.timeout)); err != nil {
		return 0, err
	}
	for {
		n, from, err := x.conn.ReadFromUDP(x.rbuf[:])
		if err != nil {
			return 0, err
		}
		if n < 4 || from.Port != x.to.Port || !from.IP.Equal(x.to.IP) {
			continue
		}
		switch binary.BigEndian.Uint16(x.rbuf[:]) {
		case opACK:
			i := binary.BigEndian.Uint16(x.rbuf[2:]) - first
			if int(i) < count {
				return int(i) + 1, nil
			}
			if missed && i == 0xffff {
				if *skip > 0 {
					*skip--
					continue
				}
				return 0, errMissedFirst
			}
		case opERROR:
			return 0, parseClientError(x.rbuf[:n])
		}
	}
}

// abort tells the client why the transfer ends; the client may be gone,
// so a failure to send is not reported.
func (x *sender) abort(why error) {
	_, _ = x.conn.WriteToUDP(errorPacket(why.Error()), x.to)
}
