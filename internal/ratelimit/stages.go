package ratelimit

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The boot-stage log policy (issue 15): a booting machine causes at most
// one line per boot stage (PXE offer, TFTP first stage, iPXE offer,
// /boot.ipxe, /ipxe, each boot file) and level per StageWindow; the rest
// of the stage's packets and requests log at Debug and are counted.
const (
	// StageWindow covers one boot's retries of a stage: firmware repeats a
	// DISCOVER for up to ~60 s and a TFTP or HTTP fetch for less.
	StageWindow = time.Minute
	// StageKeys bounds the machines a Stages remembers per window (about
	// 200 bytes each): a site's whole fleet booting at once, with room.
	StageKeys = 16384
	// A flood of new keys (random MACs or addresses) while all StageKeys
	// are live gets StageSpillBurst lines, then StageSpillRate a second.
	StageSpillBurst = 256
	StageSpillRate  = 16
)

// Stages applies the boot-stage policy for one component: Level is the
// level of a line, SummaryLine the periodic line saying how many were held
// back per stage. It is safe for concurrent use.
type Stages struct {
	once  *Once[stageKey]
	count func(stage string) // counts a held-back line (a metric); may be nil

	mu          sync.Mutex
	held        map[string]uint64 // per stage, since the last summary
	lastSummary time.Time         // for SummaryDue
}

type stageKey struct {
	id    string
	stage string
	level slog.Level
}

// NewStages returns the policy with the package defaults; count, when not
// nil, is called with the stage of every line held back.
func NewStages(count func(stage string)) *Stages {
	return NewStagesWith(StageWindow, StageKeys, StageSpillBurst, time.Second/StageSpillRate, count)
}

// NewStagesWith is NewStages with its own window and bounds (see NewOnce).
func NewStagesWith(window time.Duration, maxKeys, spillBurst int, spillEvery time.Duration, count func(stage string)) *Stages {
	return &Stages{once: NewOnce[stageKey](window, maxKeys, spillBurst, spillEvery), count: count, held: map[string]uint64{}}
}

// Level is want for the first line of machine id (a MAC, or the client
// address where there is none) in stage at level want within the window,
// Debug for the others; and suppressed=N on a line let through after N
// were held back. stage must come from a fixed set: it labels a metric.
func (s *Stages) Level(id, stage string, want slog.Level, now time.Time) (slog.Level, slog.Attr) {
	ok, held := s.once.Allow(stageKey{id: id, stage: stage, level: want}, now)
	if !ok {
		s.Held(stage)
		return slog.LevelDebug, slog.Attr{}
	}
	if held > 0 {
		return want, slog.Uint64("suppressed", held)
	}
	return want, slog.Attr{}
}

// Unlog undoes the Level call of id in stage at want that let a line
// through which another limit (a per-source budget) then held back: the
// machine's next line of the stage is its first again, not silenced for
// the rest of the window.
func (s *Stages) Unlog(id, stage string, want slog.Level) {
	s.once.Forget(stageKey{id: id, stage: stage, level: want})
}

// Held counts a line of stage held back, here or by another limit the
// caller applies (a per-source budget), for the metric and the summary.
func (s *Stages) Held(stage string) {
	s.mu.Lock()
	s.held[stage]++
	s.mu.Unlock()
	if s.count != nil {
		s.count(stage)
	}
}

// Len is how many (machine, stage, level) keys are remembered.
func (s *Stages) Len() int { return s.once.Len() }

// TakeHeld returns the lines held back per stage since the last call, and
// starts counting again.
func (s *Stages) TakeHeld() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) == 0 {
		return nil
	}
	out := s.held
	s.held = map[string]uint64{}
	return out
}

// SummaryLine writes msg at Info with suppressed=<total> and one
// attribute per stage for the lines held back since the last summary;
// nothing when none were.
func (s *Stages) SummaryLine(log *slog.Logger, msg string) {
	held := s.TakeHeld()
	if len(held) == 0 {
		return
	}
	stages := make([]string, 0, len(held))
	var total uint64
	for st, n := range held {
		stages = append(stages, st)
		total += n
	}
	slices.Sort(stages)
	attrs := make([]slog.Attr, 0, len(held)+2)
	attrs = append(attrs, slog.Uint64("suppressed", total), slog.Duration("window", s.once.window))
	for _, st := range stages {
		attrs = append(attrs, slog.Uint64(st, held[st]))
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
}

// SummaryDue writes the SummaryLine when SummaryEvery has passed since
// the last one it wrote (or since the first call): for components with no
// loop of their own, called as they log.
func (s *Stages) SummaryDue(log *slog.Logger, msg string, now time.Time) {
	s.mu.Lock()
	due := !s.lastSummary.IsZero() && (now.Sub(s.lastSummary) >= SummaryEvery || now.Before(s.lastSummary))
	if s.lastSummary.IsZero() || due {
		s.lastSummary = now
	}
	s.mu.Unlock()
	if due {
		s.SummaryLine(log, msg)
	}
}

// SummaryEvery is how often a component writes its SummaryLine.
const SummaryEvery = time.Minute

// RunSummaries writes s's SummaryLine every SummaryEvery until ctx ends,
// then once more for what is left.
func (s *Stages) RunSummaries(ctx context.Context, log *slog.Logger, msg string) {
	t := time.NewTicker(SummaryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.SummaryLine(log, msg)
			return
		case <-t.C:
			s.SummaryLine(log, msg)
		}
	}
}
