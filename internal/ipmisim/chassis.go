package ipmisim

import (
	"fmt"
	"sync"
)

// Chassis is the machine behind the simulated BMC.
type Chassis interface {
	Power() (on bool, err error)
	SetPower(on bool) error
	// Reset is a hard reset ("power reset"); a power cycle arrives as
	// SetPower(false) then SetPower(true).
	Reset() error
	// SetBootDevice gets ipmi_sim's word: none, pxe, default, cdrom, bios.
	SetBootDevice(dev string) error
}

// MemChassis is an in-memory Chassis that records every call. The zero
// value is powered off with boot device "default".
type MemChassis struct {
	mu    sync.Mutex
	on    bool
	boot  string
	calls []string
}

var _ Chassis = (*MemChassis)(nil)

// Power reports the power state.
func (c *MemChassis) Power() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.on, nil
}

// SetPower switches the power.
func (c *MemChassis) SetPower(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = on
	c.calls = append(c.calls, fmt.Sprintf("power %v", on))
	return nil
}

// Reset records a reset; a powered-off machine stays off.
func (c *MemChassis) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "reset")
	return nil
}

// SetBootDevice records the boot device.
func (c *MemChassis) SetBootDevice(dev string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boot = dev
	c.calls = append(c.calls, "boot "+dev)
	return nil
}

// BootDevice is the last boot device set ("default" before any).
func (c *MemChassis) BootDevice() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.boot == "" {
		return "default"
	}
	return c.boot
}

// Calls returns the calls so far: "power true", "power false", "reset",
// "boot pxe".
func (c *MemChassis) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}
