// Package ipmisim runs OpenIPMI's ipmi_sim, a real IPMI-over-LAN BMC, for
// tests, with the machine behind it implemented in Go (a Chassis).
//
// ipmi_sim does nothing to a machine itself: for chassis commands it runs
// the program named by the chassis_control line of its lan.conf. Start
// writes that program as a small shell script in Config.Dir which re-execs
// the test binary with an environment variable pointing at a Unix socket
// in the same directory; ChassisMain, called first thing in TestMain, sees
// the variable, forwards its arguments over the socket to the Sim and
// exits. A path-named Unix socket works across network namespaces, so
// ipmi_sim may run inside one (Config.Command).
//
// How ipmi_sim (openipmi 2.0.x as shipped by Debian) calls the program,
// found by running ipmitool against it:
//
//	ipmitool power status       get power         → stdout "power:0" or "power:1"
//	ipmitool power on           set power 1
//	ipmitool power off          set power 0
//	ipmitool power cycle        set power 0, about a second later get power
//	                            and set power 1 (ipmi_sim runs the timer)
//	ipmitool power reset        set reset 1
//	ipmitool power soft         set shutdown 1
//	ipmitool chassis bootdev X  get boot (→ "boot:<dev>"), then set boot <dev>
//	                            with <dev> one of none, pxe, default (ipmitool's
//	                            "disk"), cdrom, bios; "floppy" is not passed on
//
// There is no leading MC address argument. A non-zero exit makes ipmi_sim
// answer the command with "unspecified error". The Sim hands these to its
// Chassis: power → SetPower, reset → Reset, shutdown → SetPower(false) (a
// soft off ends off), boot → SetBootDevice with ipmi_sim's word as is.
//
// lanplus needs a guid line in the startlan block; ipmitool must be run
// with -C 3 (without it, it probes cipher suites for about ten seconds).
package ipmisim
