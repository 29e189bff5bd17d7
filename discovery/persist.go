package discovery

import (
	"context"
	"fmt"
	"time"

	"github.com/siteboot/siteboot/internal/atomicfile"
)

// Run persists the ledger every Interval while it has changed, and once more
// when ctx ends; it returns the error of that last save (nil when it
// worked or there was nothing to save). A periodic save that fails is
// logged and retried at the next tick. Each save costs one file fsync and
// one directory fsync, never one per sighting: an fsync costs milliseconds
// on ordinary disks, which a boot storm cannot wait for per packet.
func (l *Ledger) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return l.Flush()
		case <-t.C:
			if err := l.Flush(); err != nil {
				l.log.Warn("discovery: saving the ledger failed; retrying at the next tick", "err", err)
			}
		}
	}
}

// Flush writes the ledger to Path now if it changed since the last save.
func (l *Ledger) Flush() error {
	if l.cfg.Path == "" {
		return nil
	}
	l.saveMu.Lock()
	defer l.saveMu.Unlock()
	l.mu.Lock()
	l.pruneLocked(l.cfg.Now())
	gen := l.gen
	if gen == l.savedGen {
		l.mu.Unlock()
		return nil
	}
	ms := make([]machine, 0, len(l.machines))
	for _, m := range l.machines {
		ms = append(ms, *m)
	}
	l.mu.Unlock()

	sortMachines(ms)
	err := l.write(ms)
	if err != nil {
		l.saves.WithLabelValues("error").Inc()
		return err
	}
	l.saves.WithLabelValues("ok").Inc()
	l.mu.Lock()
	l.savedGen = gen
	l.mu.Unlock()
	return nil
}

func (l *Ledger) write(ms []machine) error {
	data, err := encodeLedger(ms)
	if err != nil {
		return fmt.Errorf("discovery: encode ledger: %w", err)
	}
	if err := atomicfile.Write(l.cfg.Path, data); err != nil {
		return fmt.Errorf("discovery: save ledger %s: %w", l.cfg.Path, err)
	}
	return nil
}
