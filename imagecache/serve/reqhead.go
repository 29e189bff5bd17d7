package serve

import (
	"bufio"
	"bytes"
	"errors"

	"github.com/siteboot/siteboot/internal/httpfile"
	"golang.org/x/net/http/httpguts"
)

// reqHead is what the fast path needs of a request head it takes: a GET or
// HEAD of /cache/<hex> over HTTP/1.1 without a body, every header line
// well-formed. Any other request is left to net/http, which answers it in
// full (parseHead says so with ok false), so this parser only has to be
// right about what it accepts.
type reqHead struct {
	get    bool     // GET, else HEAD
	digest [32]byte // from the request target
	close  bool     // Connection: close
	conds  httpfile.Conds
}

var (
	crlf      = []byte("\r\n")
	http11    = []byte(" HTTP/1.1")
	errTooBig = errors.New("request head larger than the read buffer")
)

// readHead returns the next request head in br, through its blank line,
// without consuming it: the head is then either served and discarded or
// handed to net/http unread. The head ends where net/http sees it end, at
// the first line that is empty once a trailing CR is dropped, so a head
// with bare LFs is found too (and refused by parseHead). It fails with
// errTooBig when the head does not fit br's buffer, and with the read
// error when the peer stops sending.
func readHead(br *bufio.Reader) ([]byte, error) {
	scanned := 0
	for {
		b, _ := br.Peek(br.Buffered())
		if n := headEnd(b, scanned); n > 0 {
			return b[:n], nil
		}
		if len(b) == br.Size() {
			return nil, errTooBig
		}
		scanned = max(len(b)-2, 0)
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// headEnd is the length of the head in b, LF LF or LF CR LF included,
// looking for the LF from offset from; 0 if b holds no whole head yet.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return 0
}

// parseHead parses a request head from readHead. ok is false for anything
// the fast path does not take: another method, target or version, a body
// (Content-Length, Transfer-Encoding), Expect, Upgrade, a Connection option
// other than close and keep-alive, a missing or repeated Host, a repeated
// conditional header, an invalid Host, bare LF, folded lines, control bytes or malformed
// header lines.
func parseHead(b []byte) (h reqHead, ok bool) {
	line, rest, _ := bytes.Cut(b, crlf)
	switch {
	case bytes.HasPrefix(line, []byte("GET ")):
		h.get, line = true, line[4:]
	case bytes.HasPrefix(line, []byte("HEAD ")):
		line = line[5:]
	default:
		return h, false
	}
	target, found := bytes.CutSuffix(line, http11)
	if !found || !bytes.HasPrefix(target, []byte(PathPrefix)) || len(target) != len(PathPrefix)+64 {
		return h, false
	}
	d, err := ParsePath(string(target))
	if err != nil {
		return h, false
	}
	h.digest = d
	hosts, nIfMatch, nIfNoneMatch := 0, 0, 0
	for {
		line, rest, _ = bytes.Cut(rest, crlf)
		if len(line) == 0 {
			break
		}
		name, value, ok := headerLine(line)
		if !ok {
			return h, false
		}
		switch {
		case equalFold(name, "Host"):
			if hosts++; !httpguts.ValidHostHeader(string(value)) {
				return h, false
			}
		case equalFold(name, "Range"):
			h.conds.Range, h.conds.NRange = string(value), h.conds.NRange+1
		case equalFold(name, "If-Range"):
			h.conds.IfRange, h.conds.NIfRange = string(value), h.conds.NIfRange+1
		case equalFold(name, "If-Match"):
			h.conds.IfMatch, nIfMatch = string(value), nIfMatch+1
		case equalFold(name, "If-None-Match"):
			h.conds.IfNoneMatch, nIfNoneMatch = string(value), nIfNoneMatch+1
		case equalFold(name, "Connection"):
			if h.close, ok = connectionClose(value, h.close); !ok {
				return h, false
			}
		case equalFold(name, "Content-Length"), equalFold(name, "Transfer-Encoding"),
			equalFold(name, "Expect"), equalFold(name, "Upgrade"):
			return h, false
		}
	}
	if hosts != 1 || h.conds.NRange > 1 || h.conds.NIfRange > 1 || nIfMatch > 1 || nIfNoneMatch > 1 {
		return h, false
	}
	return h, len(rest) == 0
}

// headerLine splits "Name: value" (RFC 9110 section 5): a token, a colon,
// the value without its surrounding blanks. ok is false for an empty or
// non-token name, a missing colon, a folded line, or a control byte in the
// value.
func headerLine(line []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, false
	}
	name, value = line[:i], line[i+1:]
	for _, c := range name {
		if !isTokenChar(c) {
			return nil, nil, false
		}
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, bytes.Trim(value, " \t"), true
}

// connectionClose folds one Connection header into close: "close" sets it,
// "keep-alive" is the HTTP/1.1 default; any other option (an upgrade, a
// hop-by-hop header name) is not for the fast path.
func connectionClose(value []byte, close bool) (bool, bool) {
	for opt := range bytes.SplitSeq(value, []byte(",")) {
		opt = bytes.Trim(opt, " \t")
		switch {
		case len(opt) == 0:
		case equalFold(opt, "close"):
			close = true
		case equalFold(opt, "keep-alive"):
		default:
			return close, false
		}
	}
	return close, true
}

// equalFold compares an ASCII header token with a lower- or mixed-case name.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c < 0x80 && bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}
