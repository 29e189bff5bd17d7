package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/internal/sdnotify"
)

// startingTick is how often serve tells the service manager, while the
// appliance is starting, why it is not ready yet and to wait startingGrace
// longer. A start whose checks stop answering is timed out by the manager.
const (
	startingTick  = 10 * time.Second
	startingGrace = 30 * time.Second
)

// readiness is what the notify loop asks of the appliance: the /readyz
// condition, and a status read that takes the state's locks.
type readiness interface {
	Ready() <-chan struct{}
	Status(context.Context) (appliance.Status, error)
}

// notifier sends sd_notify assignments (a nil *sdnotify.Notifier does nothing).
type notifier interface {
	Notify(assignments ...string) error
}

var (
	_ readiness = (*appliance.Appliance)(nil)
	_ notifier  = (*sdnotify.Notifier)(nil)
)

// manager is how serve reports to the service manager: where to, the
// watchdog interval it asked for (0: none), and how often to report while
// starting (0: startingTick).
type manager struct {
	notify   notifier
	watchdog time.Duration
	starting time.Duration
}

// tellManager reports to the service manager until ctx ends: STATUS and
// EXTEND_TIMEOUT_USEC while starting, READY=1 once the appliance is ready
// (the /readyz condition), then WATCHDOG=1 every half interval while a
// status read of the appliance answers ready, and STOPPING=1 at the end.
//
// The watchdog check runs in this process, not through the HTTP listener:
// a client holding every HTTP connection must not get the appliance
// restarted. A status read that hangs (a wedged state) stops the pings.
func tellManager(ctx context.Context, core readiness, m manager, log *slog.Logger) {
	send := notifyLogger(m.notify, log)
	defer send(sdnotify.Stopping)
	every := m.starting
	if every <= 0 {
		every = startingTick
	}
	if !waitStarted(ctx, core, every, send) || ctx.Err() != nil {
		return
	}
	st, _ := core.Status(ctx)
	send(sdnotify.Ready, sdnotify.Status(readyStatus(st)))
	if m.watchdog <= 0 {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(m.watchdog / 2)
	defer tick.Stop()
	passing := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st, err := core.Status(ctx)
		ok := err == nil && st.Ready
		if ok {
			send(sdnotify.Watchdog)
		} else if passing {
			log.Warn("watchdog check failed: not pinging the service manager", "err", err, "reason", st.NotReady)
		}
		passing = ok
	}
}

// waitStarted waits for the appliance to be ready, reporting why it is not
// at every tick; false when ctx ended first.
func waitStarted(ctx context.Context, core readiness, every time.Duration, send func(...string)) bool {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-core.Ready():
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		st, err := core.Status(ctx)
		if err != nil {
			continue
		}
		send(sdnotify.Status("starting: "+st.NotReady), sdnotify.ExtendTimeout(startingGrace))
	}
}

func readyStatus(st appliance.Status) string {
	return "ready: site " + st.SiteID + ", node " + st.NodeID + ", lease " + st.LeaseMode
}

// notifyLogger sends assignments, logging the first failure at Warn and
// later ones at Debug: one line per failure would flood the log while the
// manager's socket is gone.
func notifyLogger(n notifier, log *slog.Logger) func(...string) {
	failed := false
	return func(assignments ...string) {
		err := n.Notify(assignments...)
		switch {
		case err == nil:
			failed = false
		case !failed:
			failed = true
			log.Warn("cannot notify the service manager", "err", err)
		default:
			log.Debug("cannot notify the service manager", "err", err)
		}
	}
}
