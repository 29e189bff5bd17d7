package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// healthBodyLimit bounds what healthcheck reads of an answer: the first
// line of /readyz is all it prints.
const healthBodyLimit = 512

type healthcheckFlags struct {
	url, config string
	timeout     time.Duration
}

func newHealthcheckCmd(getenv env) *cobra.Command {
	var f healthcheckFlags
	c := &cobra.Command{
		Use:   "healthcheck [--url URL | --config FILE] [--timeout D]",
		Short: "Exit 0 when the local appliance is ready (its /readyz answers 200)",
		Long: `Ask the local appliance's /readyz whether it is ready: exit 0 and print its
answer when it says 200, exit 1 with the reason otherwise (not listening,
not ready yet, no answer within --timeout). It is the container image's
HEALTHCHECK and needs neither the admin socket nor any privilege.

Without --url the address comes from http.listen, read like serve reads it
(--config, then SITEBOOT_HTTP_LISTEN), so one changed setting moves both;
a wildcard address (":8080", "0.0.0.0:8080") is asked on loopback.
Redirects are not followed: only a 200 from that address counts.`,
		Example: `  siteboot healthcheck
  siteboot healthcheck --config /etc/siteboot/siteboot.yaml
  siteboot healthcheck --url http://10.0.0.2:8080/readyz --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := f.target(cmd, getenv)
			if err != nil {
				return err
			}
			line, err := healthcheck(cmd.Context(), target, f.timeout)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.url, "url", "", "readiness URL (default: /readyz at http.listen, http://127.0.0.1:8080/readyz unless configured)")
	fl.StringVar(&f.config, "config", "", "YAML config file serve runs with, to find http.listen")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return c
}

// target is the URL to ask: --url as given (http or https only), else
// /readyz at the configured http.listen.
func (f *healthcheckFlags) target(cmd *cobra.Command, getenv env) (string, error) {
	if f.timeout <= 0 {
		return "", fmt.Errorf("--timeout %s: want a positive duration", f.timeout)
	}
	if cmd.Flags().Changed("url") {
		if cmd.Flags().Changed("config") {
			return "", errors.New("--url and --config: give one of them")
		}
		u, err := url.Parse(f.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--url %q: want an http:// or https:// URL with a host", f.url)
		}
		return f.url, nil
	}
	cfg, err := loadConfig(f.config, getenv)
	if err != nil {
		return "", err
	}
	return readyzURL(cfg.HTTP.Listen)
}

// readyzURL is /readyz at listen (http.listen), a wildcard host replaced by
// 127.0.0.1: serve listens on "tcp", so "[::]" is dual-stack and takes
// IPv4 too, while ::1 is missing wherever IPv6 is disabled on loopback.
func readyzURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("http.listen %q: %w", listen, err)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

// healthcheck GETs target once and returns the first line of a 200
// answer; anything else is an error saying what was wrong.
func healthcheck(ctx context.Context, target string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", fmt.Errorf("healthcheck %s: %w", target, err)
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("healthcheck %s: no answer within %s", target, timeout)
		}
		return "", fmt.Errorf("healthcheck %s: %w (is 'siteboot serve' running with this http.listen?)", target, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	line := firstLine(resp.Body)
	if resp.StatusCode != http.StatusOK {
		// The reason phrase is the server's too: net/http passes it as sent.
		return "", fmt.Errorf("healthcheck %s: not ready: %s: %s", target, printable(resp.Status), line)
	}
	return line, nil
}

// firstLine is the first line of at most healthBodyLimit bytes of r, with
// anything but printable ASCII replaced, so a stranger's answer cannot
// write control sequences to a terminal or a log.
func firstLine(r io.Reader) string {
	s, _ := bufio.NewReader(io.LimitReader(r, healthBodyLimit)).ReadString('\n')
	return printable(strings.TrimRight(s, "\r\n"))
}

// printable is at most healthBodyLimit bytes of s with anything but
// printable ASCII replaced by '?'.
func printable(s string) string {
	if len(s) > healthBodyLimit {
		s = s[:healthBodyLimit]
	}
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e {
			return '?'
		}
		return c
	}, s)
}
