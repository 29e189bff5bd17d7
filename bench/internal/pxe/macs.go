package pxe

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// MaxMACs bounds how many client addresses one run uses.
const MaxMACs = 1 << 20

// GenerateMACs returns count addresses: prefix (1-5 bytes, for example
// 02:5b) followed by the index big-endian in the remaining bytes, so the
// same flags always produce the same list.
func GenerateMACs(prefix string, count int) ([]net.HardwareAddr, error) {
	p, err := parsePrefix(prefix)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > MaxMACs {
		return nil, fmt.Errorf("mac count %d: want 1..%d", count, MaxMACs)
	}
	free := 6 - len(p)
	if free < 4 && uint64(count) > uint64(1)<<(8*free) {
		return nil, fmt.Errorf("prefix %s leaves room for %d addresses, not %d", prefix, uint64(1)<<(8*free), count)
	}
	macs := make([]net.HardwareAddr, count)
	for i := range macs {
		var idx [8]byte
		binary.BigEndian.PutUint64(idx[:], uint64(i))
		m := make(net.HardwareAddr, 6)
		copy(m, p)
		copy(m[len(p):], idx[8-free:])
		macs[i] = m
	}
	return macs, nil
}

func parsePrefix(s string) ([]byte, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 1 || len(parts) > 5 {
		return nil, fmt.Errorf("mac prefix %q: want 1 to 5 bytes like 02:5b", s)
	}
	b := make([]byte, len(parts))
	for i, part := range parts {
		v, err := strconv.ParseUint(part, 16, 8)
		if err != nil || len(part) != 2 {
			return nil, fmt.Errorf("mac prefix %q: byte %q is not two hex digits", s, part)
		}
		b[i] = byte(v)
	}
	return b, nil
}

// ParseMACs reads one MAC per line; blank lines and lines starting with #
// are skipped. It refuses anything else that is not a 6-byte MAC.
func ParseMACs(r io.Reader) ([]net.HardwareAddr, error) {
	var macs []net.HardwareAddr
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		m, err := net.ParseMAC(s)
		if err != nil || len(m) != 6 {
			return nil, fmt.Errorf("mac file line %d: %q is not a 6-byte MAC", line, truncate(s, 40))
		}
		if len(macs) == MaxMACs {
			return nil, fmt.Errorf("mac file: more than %d addresses", MaxMACs)
		}
		macs = append(macs, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mac file: %w", err)
	}
	if len(macs) == 0 {
		return nil, fmt.Errorf("mac file: no addresses")
	}
	return macs, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
