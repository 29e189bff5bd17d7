package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"
)

// TFTP opcodes (RFC 1350, OACK RFC 2347).
const (
	opRRQ   = 1
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// tftpSpec is how a machine's firmware runs TFTP.
type tftpSpec struct {
	Port    int           // the server's port (69)
	BlkSize int           // blksize asked for (1468)
	Timeout time.Duration // wait per packet before a retransmit
	Tries   int           // sends of one packet in all before giving up
	Probe   bool          // a tsize-only request first, aborted on the OACK (edk2, PXE ROMs' GET_FSIZE)
	// WindowSize is the RFC 7440 windowsize asked for; 0 asks for none
	// (lock step). edk2 asks for 4 (PcdPxeTftpWindowSize) in both its
	// probe and its download and, unlike BIOS PXE ROMs, leaves tsize out
	// of the download.
	WindowSize int
}

// tftpResult is what one first-stage download did.
type tftpResult struct {
	Bytes       int64
	TSize       int64 // -1: the server did not answer tsize
	BlkSize     int
	WindowSize  int // granted; 1 without the option
	Retransmits int
}

var (
	errTFTPTimeout = errors.New("timeout")
	errTFTPServer  = errors.New("server error")
	errTFTPSize    = errors.New("size mismatch")
	errTFTPProto   = errors.New("protocol error")
)

// tftpGet downloads file from server as firmware does: a fresh port per
// request, lock-step, the last packet sent again after each Timeout.
func tftpGet(ctx context.Context, src, server netip.Addr, file string, s tftpSpec) (tftpResult, error) {
	var res tftpResult
	if s.Probe {
		size, err := tftpTransfer(ctx, src, server, file, s, true)
		res.Retransmits += size.Retransmits
		if err != nil {
			return res, fmt.Errorf("tsize probe: %w", err)
		}
		if size.TSize < 0 {
			return res, fmt.Errorf("tsize probe: %w: no tsize in the OACK", errTFTPProto)
		}
	}
	r, err := tftpTransfer(ctx, src, server, file, s, false)
	r.Retransmits += res.Retransmits
	return r, err
}

// tftpTransfer runs one request. probe: ask for tsize only and abort on
// the OACK.
func tftpTransfer(ctx context.Context, src, server netip.Addr, file string, s tftpSpec, probe bool) (tftpResult, error) {
	res := tftpResult{TSize: -1, BlkSize: 512, WindowSize: 1}
	laddr := &net.UDPAddr{}
	if src.IsValid() {
		laddr.IP = src.AsSlice()
	}
	conn, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		return res, fmt.Errorf("listen %s: %w", laddr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()

	rrq := buildRRQ(file, s.BlkSize, s.WindowSize, probe)
	dst := &net.UDPAddr{IP: server.AsSlice(), Port: s.Port}
	var peer *net.UDPAddr // the server's transfer port, from its first answer
	last := rrq
	block := uint16(1) // next DATA block expected
	inWindow := 0      // blocks received since the last ACK
	buf := make([]byte, 65536+4)
	sends := 0
	send := func() error {
		to := dst
		if peer != nil {
			to = peer
		}
		sends++
		if sends > 1 {
			res.Retransmits++
		}
		_, err := conn.WriteToUDP(last, to)
		return err
	}
	if err := send(); err != nil {
		return res, fmt.Errorf("send RRQ: %w", err)
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(s.Timeout))
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return res, fmt.Errorf("read: %w", err)
			}
			if sends >= s.Tries {
				what := "RRQ"
				if peer != nil {
					what = fmt.Sprintf("ACK %d", block-1)
				}
				return res, fmt.Errorf("%w: no answer to %s after %d sends %v apart (%d bytes received)", errTFTPTimeout, what, sends, s.Timeout, res.Bytes)
			}
			if peer != nil && res.WindowSize > 1 {
				// edk2 answers a quiet window with the ACK of the last
				// block it has in order.
				last, inWindow = buildACK(block-1), 0
			}
			if err := send(); err != nil {
				return res, fmt.Errorf("send: %w", err)
			}
			continue
		}
		if peer != nil && !udpAddrEqual(from, peer) {
			continue // another transfer's or a stray datagram: RFC 1350 §4 would ERROR it; firmware ignores it
		}
		pkt := buf[:n]
		if len(pkt) < 4 {
			return res, fmt.Errorf("%w: %d-byte datagram", errTFTPProto, len(pkt))
		}
		op, num := binary.BigEndian.Uint16(pkt), binary.BigEndian.Uint16(pkt[2:])
		switch op {
		case opERROR:
			msg := string(bytes.TrimRight(pkt[4:], "\x00"))
			return res, fmt.Errorf("%w %d: %q", errTFTPServer, num, clip(msg))
		case opOACK:
			if peer != nil {
				continue // a duplicate OACK: our ACK 0 is on its way or lost
			}
			peer = from
			if err := readOACK(pkt[2:], &res, s.BlkSize, s.WindowSize); err != nil {
				return res, err
			}
			if probe {
				_, _ = conn.WriteToUDP(buildError(8, "tsize probe done"), peer)
				return res, nil
			}
			last, sends = buildACK(0), 0
			if err := send(); err != nil {
				return res, fmt.Errorf("send ACK 0: %w", err)
			}
		case opDATA:
			if peer == nil {
				if probe {
					return res, fmt.Errorf("%w: DATA instead of an OACK to a tsize request", errTFTPProto)
				}
				peer = from // no options granted: 512-byte blocks
			}
			switch {
			case num == block:
				res.Bytes += int64(len(pkt) - 4)
				final := len(pkt)-4 < res.BlkSize
				inWindow++
				// As edk2 does: an ACK for a whole window or the last
				// block; in lock step (window 1) that is every block.
				if final || inWindow >= res.WindowSize {
					last, sends, inWindow = buildACK(num), 0, 0
					if err := send(); err != nil {
						return res, fmt.Errorf("send ACK %d: %w", num, err)
					}
				}
				if final {
					if res.TSize >= 0 && res.Bytes != res.TSize {
						return res, fmt.Errorf("%w: %d bytes received, tsize said %d", errTFTPSize, res.Bytes, res.TSize)
					}
					return res, nil
				}
				block++
			case res.WindowSize == 1 && num == block-1:
				// Our ACK was lost and the server sent the block again:
				// acknowledge it again (that is the retransmit of ours).
				if err := send(); err != nil {
					return res, fmt.Errorf("send ACK %d: %w", num, err)
				}
			case res.WindowSize > 1:
				// Any other block (a later one after a loss, or one sent
				// again): acknowledge the last block received in order and
				// count the window from there, as edk2 does for every
				// block it did not expect (Mtftp4RrqHandleData), so the
				// next window starts after it (RFC 7440 §4).
				last, sends, inWindow = buildACK(block-1), 0, 0
				if err := send(); err != nil {
					return res, fmt.Errorf("send ACK %d: %w", block-1, err)
				}
			}
		default:
			return res, fmt.Errorf("%w: opcode %d", errTFTPProto, op)
		}
	}
}

func udpAddrEqual(a, b *net.UDPAddr) bool { return a.Port == b.Port && a.IP.Equal(b.IP) }

// buildRRQ is a request as the firmware sends it: tsize (always in a
// probe; in the download only without windowsize, as BIOS PXE ROMs ask
// and edk2 does not), blksize, and windowsize when asked for.
func buildRRQ(file string, blksize, window int, probe bool) []byte {
	b := []byte{0, opRRQ}
	b = append(append(b, file...), 0)
	b = append(b, "octet\x00"...)
	if probe || window == 0 {
		b = append(b, "tsize\x000\x00"...)
	}
	if blksize > 0 && blksize != 512 {
		b = append(append(append(b, "blksize\x00"...), strconv.Itoa(blksize)...), 0)
	}
	if window > 0 {
		b = append(append(append(b, "windowsize\x00"...), strconv.Itoa(window)...), 0)
	}
	return b
}

func buildACK(block uint16) []byte { return []byte{0, opACK, byte(block >> 8), byte(block)} }

func buildError(code uint16, msg string) []byte {
	return append(append([]byte{0, opERROR, byte(code >> 8), byte(code)}, msg...), 0)
}

// readOACK takes blksize, tsize and windowsize from an OACK's options; a
// blksize or windowsize larger than asked or out of range is a server bug.
func readOACK(opts []byte, res *tftpResult, asked, askedWindow int) error {
	fields := bytes.Split(bytes.TrimSuffix(opts, []byte{0}), []byte{0})
	if len(fields)%2 != 0 {
		return fmt.Errorf("%w: OACK options %q are not name/value pairs", errTFTPProto, clip(string(opts)))
	}
	for i := 0; i < len(fields); i += 2 {
		name, val := string(bytes.ToLower(fields[i])), string(fields[i+1])
		v, err := strconv.ParseInt(val, 10, 64)
		switch name {
		case "blksize":
			if err != nil || v < 8 || v > 65464 || int(v) > asked {
				return fmt.Errorf("%w: OACK blksize %q (asked %d)", errTFTPProto, clip(val), asked)
			}
			res.BlkSize = int(v)
		case "windowsize":
			if err != nil || v < 1 || v > int64(max(askedWindow, 0)) {
				return fmt.Errorf("%w: OACK windowsize %q (asked %d)", errTFTPProto, clip(val), askedWindow)
			}
			res.WindowSize = int(v)
		case "tsize":
			if err != nil || v < 0 {
				return fmt.Errorf("%w: OACK tsize %q", errTFTPProto, clip(val))
			}
			res.TSize = v
		}
	}
	return nil
}
