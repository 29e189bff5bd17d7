// Package proc reads what the load generators report about their own
// process.
package proc

import (
	"syscall"
	"time"
)

// CPU is the user plus system CPU time this process has used so
// far, or 0 when the kernel does not say.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
