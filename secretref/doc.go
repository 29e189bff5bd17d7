// Package secretref parses and resolves secret references: the strings that
// stand in for a secret value in entries and requests (discovery tokens, BMC
// credentials, secret headers). A reference names where the value lives;
// the value itself is read only when it is needed and is never logged.
//
// Schemes:
//
//	env://NAME        the environment variable NAME of the appliance process
//	file:///abs/path  the whole content of a file, one trailing newline removed
//
// A Policy confines both: file:// refs reach only regular files beneath
// one directory (secrets.dir), env:// refs only variables whose names
// start with one prefix (secrets.env_prefix), and the data dir, which
// holds the node key, is never reachable. Policy.Check applies it without
// I/O when a ref is stored; Resolver applies it again when the ref is
// read, opening the file with openat2(2) RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS (Linux 5.6; an O_NOFOLLOW walk elsewhere) and
// O_NONBLOCK, and refusing anything but a regular file of one link and at
// most MaxSize bytes.
package secretref
