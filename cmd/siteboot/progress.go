package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"golang.org/x/term"
)

// progress shows PullImages snapshots: redrawn bars on a terminal, a line
// per change elsewhere, every snapshot as JSON with -o json.
type progress struct {
	w     io.Writer
	tty   bool
	json  bool
	drawn int               // lines drawn by the last redraw
	last  map[string]string // plain mode: the last line printed per image
}

func newProgress(w io.Writer, json bool) *progress {
	tty := false
	if f, ok := w.(*os.File); ok && !json {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progress{w: w, tty: tty, json: json, last: map[string]string{}}
}

func (p *progress) update(resp *sitebootv1.PullImagesResponse) error {
	if p.json {
		return printJSON(p.w, resp)
	}
	if p.tty {
		return p.redraw(resp.GetImages())
	}
	for _, im := range resp.GetImages() {
		id := hex.EncodeToString(im.GetSha256())[:16]
		line := fmt.Sprintf("%s %s %s", id, im.GetState(), pct(im))
		if im.GetReason() != "" {
			line += " (" + im.GetReason() + ")"
		}
		if p.last[id] != line {
			p.last[id] = line
			if _, err := fmt.Fprintln(p.w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// pct is the progress in tens of percent, so plain output does not print
// a line per poll.
func pct(im *sitebootv1.Image) string {
	switch {
	case im.GetState() == "ready":
		return humanBytes(im.GetSizeBytes())
	case im.GetSizeBytes() == 0:
		return humanBytes(im.GetDoneBytes())
	}
	return fmt.Sprintf("%d%%", 10*(10*im.GetDoneBytes()/im.GetSizeBytes()))
}

const barWidth = 30

func (p *progress) redraw(images []*sitebootv1.Image) error {
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	for _, im := range images {
		frac := 0.0
		switch {
		case im.GetState() == "ready":
			frac = 1
		case im.GetSizeBytes() > 0:
			frac = float64(im.GetDoneBytes()) / float64(im.GetSizeBytes())
		}
		n := int(frac * barWidth)
		fmt.Fprintf(&b, "\x1b[2K%s [%s%s] %5.1f%% %-8s %s\n", hex.EncodeToString(im.GetSha256())[:16],
			strings.Repeat("=", n), strings.Repeat(" ", barWidth-n), 100*frac, im.GetState(), im.GetReason())
	}
	p.drawn = len(images)
	_, err := io.WriteString(p.w, b.String())
	return err
}
