package main

import "runtime"

// procsPerCPU is how many Go processors (GOMAXPROCS) serve runs with per
// CPU the runtime found (the machine's CPUs, or the container's CPU quota).
//
// Why more than one: a goroutine in a long system call (a sendfile of a
// megabyte takes a few hundred microseconds of kernel work) keeps its
// processor until the runtime's monitor takes it back, 20 µs or more
// later. With one processor per CPU, on a machine whose CPUs also carry
// the network stack, a DHCP request or a TFTP ACK that arrives meanwhile
// waits for a processor; with two per CPU one is usually idle in the
// network poller and takes it at once. The kernel still decides which
// thread runs, and the bulk loops' threads run niced (internal/httpserver).
// Measured in BENCHMARKS.md section G ("Two processors per CPU").
const procsPerCPU = 2

// serveProcs is the GOMAXPROCS serve sets: procsPerCPU per processor the
// runtime chose, or 0 (leave it) when the operator chose with GOMAXPROCS
// or a CPU quota bounds the runtime's choice (current below the CPUs the
// process may run on): twice the quota's worth of running threads would
// spend it early in each period and be throttled for the rest, and
// setting GOMAXPROCS would stop the runtime following quota changes.
func serveProcs(getenv env, current, cpus int) int {
	if v, ok := getenv("GOMAXPROCS"); ok && v != "" {
		return 0
	}
	if current < cpus {
		return 0
	}
	return procsPerCPU * max(current, 1)
}

// raiseProcs applies serveProcs and says what it did.
func raiseProcs(getenv env) (from, to int) {
	from = runtime.GOMAXPROCS(0)
	to = from
	if n := serveProcs(getenv, from, runtime.NumCPU()); n > 0 {
		runtime.GOMAXPROCS(n)
		to = n
	}
	return from, to
}
