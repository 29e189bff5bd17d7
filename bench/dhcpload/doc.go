// Command dhcpload is siteboot's DHCP load generator: it sends PXE
// DHCPDISCOVERs (RFC 2131 §4.4.1, with the PXE options of RFC 4578: 93
// client arch, 94 network interface id, 97 machine id, and option 60
// "PXEClient:Arch:xxxxx:UNDI:yyyzzz") from many MACs and matches the OFFERs
// that come back by xid.
//
// It counts proxy offers (yiaddr 0.0.0.0 and option 60 "PXEClient", the
// shape of RFC 4578 / PXE 2.1 proxyDHCP replies) as answers and reports
// every other reply to its requests per server (option 54), so one run can
// show who answered; replies to xids it did not send (another client's, an
// earlier run's) are counted apart as foreign. Load is either closed-loop
// (-outstanding K requests in flight) or open-loop (-rate R requests per
// second on a fixed schedule; latency is measured from the actual send, and
// how far sends fell behind the schedule is reported too, so a slow sender
// cannot hide queueing). Results come as a table or, with -json, as one
// JSON object.
//
// It binds UDP 68 (or -listen) with SO_REUSEADDR and SO_BROADCAST: run it in
// a network namespace of its own, next to the server under test, never on a
// real network. Duration, rate, in-flight count and request count are all
// capped (see -help).
package main
