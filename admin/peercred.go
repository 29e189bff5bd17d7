package admin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
)

// PeerCred is the identity of a Unix-socket peer, read with SO_PEERCRED
// (and SO_PEERGROUPS for its supplementary groups) when it connects.
type PeerCred struct {
	credentials.CommonAuthInfo
	UID, GID uint32
	PID      int32
	Groups   []uint32
}

// AuthType implements credentials.AuthInfo.
func (PeerCred) AuthType() string { return "peercred" }

// Allowed reports whether the peer is root or belongs to group gid (a
// negative gid admits root only).
func (p PeerCred) Allowed(gid int) bool {
	if p.UID == 0 {
		return true
	}
	if gid < 0 {
		return false
	}
	return p.GID == uint32(gid) || slices.Contains(p.Groups, uint32(gid))
}

// peerCredentials is a credentials.TransportCredentials for Unix sockets:
// the handshake reads the peer's credentials from the kernel; it exchanges
// no bytes.
type peerCredentials struct{}

func (peerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("admin: peer credentials are server-side only")
}

func (peerCredentials) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("admin: peer credentials need a Unix socket, got %T", c)
	}
	pc, err := readPeerCred(uc)
	if err != nil {
		return nil, nil, err
	}
	pc.SecurityLevel = credentials.NoSecurity
	return c, pc, nil
}

func (peerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}
func (p peerCredentials) Clone() credentials.TransportCredentials { return p }
func (peerCredentials) OverrideServerName(string) error           { return nil }

func readPeerCred(uc *net.UnixConn) (PeerCred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("admin: peer credentials: %w", err)
	}
	var (
		pc     PeerCred
		opErr  error
		groups []uint32
	)
	err = raw.Control(func(fd uintptr) {
		var ucred *unix.Ucred
		ucred, opErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if opErr != nil {
			return
		}
		pc.UID, pc.GID, pc.PID = ucred.Uid, ucred.Gid, ucred.Pid
		groups, opErr = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return PeerCred{}, fmt.Errorf("admin: peer credentials: %w", err)
	}
	pc.Groups = groups
	return pc, nil
}

// peerGroups reads SO_PEERGROUPS: the peer's supplementary group ids.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]byte, 4*256)
	size := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
	}
	groups := make([]uint32, 0, size/4)
	for i := uint32(0); i+4 <= size; i += 4 {
		groups = append(groups, binary.NativeEndian.Uint32(buf[i:]))
	}
	return groups, nil
}
