// Package httpserver runs the appliance's HTTP listener (iPXE scripts,
// boot files, the image cache, health and metrics) under the limits every
// client of it is held to, whichever code answers it (net/http, or the
// image cache's fast path in front of net/http):
//
//   - at most MaxConnections open connections: one more is accepted and
//     closed at once, after a best-effort "503 Service Unavailable" with
//     Retry-After, never queued;
//   - a progress deadline on every write: a response whose client accepts
//     no byte for ProgressTimeout is aborted and its connection closed,
//     while one that is slow but moving is not (the deadline moves with
//     every write and every chunk sendfile sends, and, for a body over
//     64 KiB, when it passes and the client has ACKed 64 KiB more since
//     the body began or the deadline last passed), so
//     a reader that stopped cannot hold a file open, or an image in
//     EVICTING, for long;
//   - ReadHeaderTimeout for a request head, IdleTimeout between requests,
//     and request heads of at most 64 KiB (431 beyond), so that a head
//     costs bounded memory whatever the number of connections;
//   - a request that announces a body (no handler reads one) has
//     ReadHeaderTimeout more to send it, and its connection is closed
//     after the answer, so announcing a body and sending none holds
//     nothing.
//
// The deadline needs no allocation per request: each connection keeps its
// state, and file bodies go out through its own sendfile loop (the one Go
// runs for net.TCPConn, with the deadline pushed forward after each
// chunk). Bodies of bulkAbove and up go out from the bulk loops instead
// (bulk.go): a few epoll loops on threads at a lower priority, which keep
// the progress timeout themselves and end a body at once when its
// connection is closed.
//
// A connection's reads, writes, socket options and (for a range whose
// pages are all in memory) sendfile are raw system calls, which the Go
// runtime does not track: its own calls wake the runtime's monitor thread
// whenever every processor was idle, which under many connections cost
// more thread switches than the responses (rawcalls.go).
package httpserver
