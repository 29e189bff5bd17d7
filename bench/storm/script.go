package main

import (
	"fmt"
	"net/url"
	"strings"
)

// expand fills in ${name} and ${name:type} as iPXE does before it runs a
// line: a setting that is not set expands to nothing; a scope
// ("net0/mac") is dropped. Types: uristring percent-encodes everything but
// RFC 3986 unreserved characters; hexhyp and hexraw respell a MAC or UUID
// with hyphens or no separator; any other type leaves the value as it is.
func expand(line string, settings map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(line, "${")
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		j := strings.IndexByte(line[i:], '}')
		if j < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:i])
		name, typ, _ := strings.Cut(line[i+2:i+j], ":")
		if k := strings.LastIndexByte(name, '/'); k >= 0 {
			name = name[k+1:]
		}
		b.WriteString(formatSetting(settings[name], typ))
		line = line[i+j+1:]
	}
}

func formatSetting(v, typ string) string {
	switch typ {
	case "uristring":
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			c := v[i]
			if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	case "hexhyp":
		return strings.ReplaceAll(v, ":", "-")
	case "hexraw":
		return strings.NewReplacer(":", "", "-", "").Replace(v)
	}
	return v
}

// script is what a machine takes from one iPXE script.
type script struct {
	Chain   string   // the first chain (or imgexec) target, "" if none
	Kernel  string   // the kernel line's image, "" if none
	Initrds []string // every initrd line's image
}

// optionsWithArg are the image command options that take a value as the
// next word (iPXE's image commands: --name/-n, --timeout/-t).
var optionsWithArg = map[string]bool{"--name": true, "-n": true, "--timeout": true, "-t": true}

// parseScript reads the commands a boot needs from an iPXE script, after
// expanding settings in each line. base resolves relative URIs, as iPXE
// resolves them against the script's own URI. It does not interpret
// control flow: it takes the first chain and the kernel and initrd lines,
// which is what siteboot's and a typical site's boot scripts contain.
func parseScript(body string, base *url.URL, settings map[string]string) (script, error) {
	var s script
	lines := strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "#!ipxe") {
		return s, fmt.Errorf("not an iPXE script: first line %q", clip(lines[0]))
	}
	for _, line := range lines[1:] {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ':' {
			continue
		}
		for _, cmd := range splitCommands(expand(line, settings)) {
			if len(cmd) == 0 {
				continue
			}
			img, ok := imageArg(cmd[1:])
			switch cmd[0] {
			case "chain", "imgexec":
				if ok && s.Chain == "" {
					u, err := resolve(base, img)
					if err != nil {
						return s, err
					}
					s.Chain = u
				}
			case "kernel", "imgselect":
				if ok && s.Kernel == "" {
					u, err := resolve(base, img)
					if err != nil {
						return s, err
					}
					s.Kernel = u
				}
			case "initrd", "module":
				if ok {
					u, err := resolve(base, img)
					if err != nil {
						return s, err
					}
					s.Initrds = append(s.Initrds, u)
				}
			}
		}
	}
	return s, nil
}

// splitCommands splits a line at iPXE's || and && into commands of words.
func splitCommands(line string) [][]string {
	var out [][]string
	var cur []string
	for _, w := range strings.Fields(line) {
		if w == "||" || w == "&&" {
			out, cur = append(out, cur), nil
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

// imageArg returns the first word after the options.
func imageArg(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, true
		}
		if optionsWithArg[a] {
			i++
		}
	}
	return "", false
}

func resolve(base *url.URL, ref string) (string, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("image URI %q: %w", clip(ref), err)
	}
	if base != nil {
		u = base.ResolveReference(u)
	}
	// Check the string that will be fetched, not the parsed form: a host
	// such as "::" parses but does not survive a round trip.
	out := u.String()
	if !isHTTPURL(out) {
		return "", fmt.Errorf("image URI %q: want an http(s) URL with a host", clip(ref))
	}
	return out, nil
}

// clip shortens what a server sent before it goes into an error message.
func clip(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
