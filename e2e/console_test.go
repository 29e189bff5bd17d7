package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// console drives a serial login console (the appliance VM's ttyS1, a unix
// socket QEMU listens on) as a person at a terminal would. Every wait is
// for a pattern and bounded by a context, so a guest that stops answering
// fails the step with what it last printed instead of hanging the test.
type console struct {
	conn io.ReadWriteCloser

	mu sync.Mutex
	// buf is what was read and not yet consumed by expect, carriage
	// returns dropped (the tty writes "\r\n"), at most consoleKeep bytes.
	buf []byte
	// err is why reading stopped (io.EOF when the guest went away).
	err error
	// transcript receives everything read, and a note of each command run.
	transcript io.Writer

	// poke is signalled after each read; done is closed when reading stops.
	poke chan struct{}
	done chan struct{}
	// seq numbers the markers of each command, so a marker left over from
	// an interrupted command never passes for a later one's.
	seq int
}

// consoleKeep bounds the unconsumed output kept (a chatty guest that is
// never asked anything must not grow the test's memory).
const consoleKeep = 1 << 20

// Waits of login, each a bound on one exchange.
const (
	consoleQuiet  = time.Second
	consolePrompt = 15 * time.Second
	// consoleAuth covers PAM's delay after a wrong password (about 3 s) and
	// a slow emulated guest.
	consoleAuth = time.Minute
)

var (
	loginPrompt    = regexp.MustCompile(`login: $`)
	passwordPrompt = regexp.MustCompile(`Password: ?`)
	// afterPassword is the shell prompt of root (#) or a user ($) at the end
	// of what was printed, or the refusal.
	afterPassword = regexp.MustCompile(`Login incorrect|[#$] $`)
)

// newConsole reads conn until it is closed; transcript (may be nil) gets a
// copy of everything read.
func newConsole(conn io.ReadWriteCloser, transcript io.Writer) *console {
	if transcript == nil {
		transcript = io.Discard
	}
	c := &console{conn: conn, transcript: transcript, poke: make(chan struct{}, 1), done: make(chan struct{})}
	go c.read()
	return c
}

func (c *console) read() {
	defer close(c.done)
	b := make([]byte, 4096)
	for {
		n, err := c.conn.Read(b)
		data := bytes.ReplaceAll(b[:n], []byte("\r"), nil)
		c.mu.Lock()
		c.buf = append(c.buf, data...)
		if len(c.buf) > consoleKeep {
			c.buf = append([]byte(nil), c.buf[len(c.buf)-consoleKeep:]...)
		}
		_, _ = c.transcript.Write(data)
		if err != nil {
			c.err = err
		}
		c.mu.Unlock()
		select {
		case c.poke <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// Close closes the connection and waits until reading has stopped.
func (c *console) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// send writes s; a guest that does not take it within 10 s is an error.
func (c *console) send(s string) error {
	if d, ok := c.conn.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Now().Add(10 * time.Second))
	}
	if _, err := io.WriteString(c.conn, s); err != nil {
		return fmt.Errorf("console: write: %w", err)
	}
	return nil
}

// note adds a line to the transcript (never the password).
func (c *console) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.transcript, "\n[console: "+format+"]\n", args...)
}

// expect waits until the unconsumed output matches re, consumes it up to
// the end of the match and returns the match and its groups.
func (c *console) expect(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		c.mu.Lock()
		loc := re.FindSubmatchIndex(c.buf)
		var m []string
		if loc != nil {
			for i := 0; i+1 < len(loc); i += 2 {
				if loc[i] >= 0 {
					m = append(m, string(c.buf[loc[i]:loc[i+1]]))
				} else {
					m = append(m, "")
				}
			}
			c.buf = c.buf[loc[1]:]
		}
		rerr, last := c.err, c.tailLocked()
		c.mu.Unlock()
		if loc != nil {
			return m, nil
		}
		if rerr != nil {
			return nil, fmt.Errorf("console: waiting for %q: the console closed (%v); its last output:\n%s", re, rerr, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("console: waiting for %q: %w; its last output:\n%s", re, ctx.Err(), last)
		case <-c.poke:
		}
	}
}

// settle waits until the console has been quiet for quiet, and returns
// (consuming) everything it printed by then.
func (c *console) settle(ctx context.Context, quiet time.Duration) ([]byte, error) {
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("console: waiting for it to fall quiet: %w; its last output:\n%s", ctx.Err(), c.tail())
		case <-c.poke:
			// Output goes on: wait a whole quiet period again.
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(quiet)
		case <-timer.C:
			c.mu.Lock()
			out := c.buf
			c.buf = nil
			c.mu.Unlock()
			return out, nil
		}
	}
}

// tail is the last 2 KiB of the unconsumed output.
func (c *console) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tailLocked()
}

func (c *console) tailLocked() string {
	return lastBytes(string(c.buf), 2048)
}

// login logs in as user at a getty and turns the session into a plain
// POSIX shell without echo or prompts, so that run sees only what the
// commands print.
func (c *console) login(ctx context.Context, user, password string) error {
	// The getty printed its prompt before anyone listened (QEMU drops what
	// a socket serial port prints while nobody is connected), and the port
	// drops input until the getty opens it: an empty line asks for a fresh
	// prompt. The prompt counts once the console has fallen quiet after it,
	// so the name answers the last prompt, not one an earlier empty line
	// is about to produce.
	for {
		if err := c.send("\n"); err != nil {
			return err
		}
		out, err := c.settle(ctx, consoleQuiet)
		if err != nil {
			return fmt.Errorf("console: no login prompt: %w", err)
		}
		if loginPrompt.Match(out) {
			break
		}
		c.mu.Lock()
		rerr := c.err
		c.mu.Unlock()
		if rerr != nil {
			return fmt.Errorf("console: no login prompt: the console closed (%v); its last output:\n%s", rerr, lastBytes(string(out), 2048))
		}
	}
	c.note("login as %s", user)
	if err := c.send(user + "\n"); err != nil {
		return err
	}
	if err := c.within(ctx, consolePrompt, passwordPrompt); err != nil {
		return err
	}
	if err := c.send(password + "\n"); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, consoleAuth)
	defer cancel()
	m, err := c.expect(actx, afterPassword)
	if err != nil {
		return err
	}
	if m[0] == "Login incorrect" {
		return fmt.Errorf("console: login as %s: Login incorrect", user)
	}
	// sh, not the login shell: no line editing, no bracketed paste, no
	// prompt escapes; echo off, so the commands do not come back; a dumb
	// terminal and no pager, so systemctl and dpkg print plain text.
	if err := c.send("stty -echo; exec /bin/sh\n"); err != nil {
		return err
	}
	c.seq++
	setup := "PS1= PS2=; export TERM=dumb PAGER=cat SYSTEMD_PAGER=cat SYSTEMD_COLORS=0"
	if err := c.send(fmt.Sprintf("%s; printf '__R%%s__\\n' %d\n", setup, c.seq)); err != nil {
		return err
	}
	return c.within(ctx, consolePrompt, regexp.MustCompile(`__R`+strconv.Itoa(c.seq)+`__\n`))
}

// within is expect bounded by d.
func (c *console) within(ctx context.Context, d time.Duration, re *regexp.Regexp) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := c.expect(ctx, re)
	return err
}

// run runs cmd in the logged-in shell, its stdin /dev/null (a command that
// asks a question fails instead of eating the next line), and returns what
// it printed (stdout and stderr, both the tty) and its exit status. When ctx
// ends first, cmd is interrupted (^C) and the shell checked before run
// returns the error, so the console stays usable.
func (c *console) run(ctx context.Context, cmd string) (string, int, error) {
	c.seq++
	n := c.seq
	c.note("run %q", cmd)
	line := fmt.Sprintf("printf '__B%%s__\\n' %d\n{ %s\n} </dev/null\nprintf '__E%%s=%%s__\\n' %d \"$?\"\n", n, cmd, n)
	if err := c.send(line); err != nil {
		return "", 0, err
	}
	_, err := c.expect(ctx, regexp.MustCompile(`__B`+strconv.Itoa(n)+`__\n`))
	var m []string
	if err == nil {
		m, err = c.expect(ctx, regexp.MustCompile(`(?s)^(.*?)__E`+strconv.Itoa(n)+`=(\d+)__\n`))
	}
	if err != nil {
		if ctx.Err() != nil {
			if rerr := c.interrupt(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return "", 0, fmt.Errorf("console: %q: %w", cmd, err)
	}
	rc, _ := strconv.Atoi(m[2])
	return m[1], rc, nil
}

// interrupt sends ^C to the command that did not finish and waits until
// the shell answers again.
func (c *console) interrupt() error {
	c.seq++
	c.note("interrupt (^C)")
	if err := c.send(fmt.Sprintf("\x03\nprintf '__S%%s__\\n' %d\n", c.seq)); err != nil {
		return err
	}
	if err := c.within(context.Background(), consolePrompt, regexp.MustCompile(`__S`+strconv.Itoa(c.seq)+`__\n`)); err != nil {
		return fmt.Errorf("after ^C the shell did not answer: %w", err)
	}
	return nil
}
