package netlab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// Screendump asks QEMU to write the guest's screen to path (PPM), which
// helps when a boot test fails: convert it with imagemagick to look at it.
func (vm *VM) Screendump(ctx context.Context, path string) error {
	_, err := vm.MonitorCommand(ctx, "screendump "+path)
	return err
}

// MonitorCommand sends one command to the QEMU human monitor and returns
// what it printed before the next prompt.
func (vm *VM) MonitorCommand(ctx context.Context, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", vm.Monitor)
	if err != nil {
		return "", fmt.Errorf("qemu monitor: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	if _, err := readToPrompt(r); err != nil {
		return "", fmt.Errorf("qemu monitor banner: %w", err)
	}
	if _, err := fmt.Fprintf(conn, "%s\n", command); err != nil {
		return "", fmt.Errorf("qemu monitor %q: %w", command, err)
	}
	out, err := readToPrompt(r)
	if err != nil {
		return "", fmt.Errorf("qemu monitor %q: %w", command, err)
	}
	return out, nil
}

// readToPrompt reads until the monitor's "(qemu) " prompt.
func readToPrompt(r *bufio.Reader) (string, error) {
	var sb strings.Builder
	for !strings.HasSuffix(sb.String(), "(qemu) ") {
		b, err := r.ReadByte()
		if err != nil {
			return sb.String(), err
		}
		sb.WriteByte(b)
	}
	return strings.TrimSuffix(sb.String(), "(qemu) "), nil
}
