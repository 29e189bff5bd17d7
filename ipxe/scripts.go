package ipxe

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// initrdName is the name the ramdisk's initrd is fetched under; UEFI kernel
// boot through iPXE finds it only by an initrd=<name> kernel parameter.
const initrdName = "initrd"

// Kernel parameters the ramdisk script sets (see README.md).
const (
	paramSiteID         = "bc.site_id"
	paramAppliance      = "bc.appliance"
	paramMAC            = "bc.mac"
	paramWorkflowID     = "bc.workflow_id"
	paramDiscoveryToken = "bc.discovery_token"
	paramAssertion      = "bc.assertion"
)

// maxCmdline is the kernel command line limit on x86 and arm64
// (COMMAND_LINE_SIZE).
const maxCmdline = 2048

// All script builders take values that are already safe (see escape.go):
// URLs passed bootentry.CheckScriptURL, MACs were normalised, parameters
// went through argValue.

// bootstrapScript is /boot.ipxe: a chain straight to this appliance's /ipxe
// with the machine's identity (a script URL, never a first stage again, so
// the chainload cannot loop), after dhcp with retries when iPXE has no
// address yet (it may have taken an address-only offer and missed the
// proxy one). An iPXE that fetched this script
// has one: configuring the interface again cost about 16 s per boot in the
// e2e tests, for nothing. SMBIOS strings are sent :uristring-encoded, as
// they may hold spaces.
func bootstrapScript(base string, retry time.Duration) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	b.WriteString("# siteboot bootstrap: DHCP (with retries) unless configured, then this machine's script.\n")
	b.WriteString("set siteboot_tries:int32 0\n")
	b.WriteString("isset ${ip} && goto script ||\n")
	b.WriteString(":dhcp\n")
	b.WriteString("dhcp && goto script ||\n")
	b.WriteString("inc siteboot_tries\n")
	b.WriteString("iseq ${siteboot_tries} 10 && goto script ||\n")
	b.WriteString("echo siteboot: DHCP attempt ${siteboot_tries} failed, retrying in 3 seconds\n")
	b.WriteString("sleep 3\n")
	b.WriteString("goto dhcp\n")
	b.WriteString(":script\n")
	fmt.Fprintf(&b, "chain --autofree --replace %s/ipxe?mac=${mac}&uuid=${uuid}&buildarch=${buildarch}&platform=${platform}&serial=${serial:uristring}&asset=${asset:uristring} ||\n", base)
	fmt.Fprintf(&b, "echo siteboot: no script from %s yet, retrying in %d seconds\n", base, seconds(retry))
	fmt.Fprintf(&b, "sleep %d\n", seconds(retry))
	b.WriteString("set siteboot_tries:int32 0\n")
	b.WriteString("goto dhcp\n")
	return b.String()
}

// ramdiskParams are the bc.* values of a ramdisk script, raw (unencoded).
type ramdiskParams struct {
	siteID, appliance, mac, workflowID, token, assertion string
}

// cmdline renders the kernel parameters after the kernel URL.
func (p ramdiskParams) cmdline(fixed string) string {
	args := []string{"initrd=" + initrdName}
	if fixed != "" {
		args = append(args, fixed)
	}
	add := func(name, val string) {
		if val != "" {
			args = append(args, name+"="+argValue(val))
		}
	}
	add(paramSiteID, p.siteID)
	add(paramAppliance, p.appliance)
	add(paramMAC, p.mac)
	add(paramWorkflowID, p.workflowID)
	add(paramDiscoveryToken, p.token)
	add(paramAssertion, p.assertion)
	return strings.Join(args, " ")
}

// ramdiskScript boots kernel and initrd with the given command line; on
// failure it waits and asks the appliance again.
func ramdiskScript(base, mac, kernel, initrd, cmdline string, retry time.Duration) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "# siteboot: ramdisk boot of %s\n", mac)
	fmt.Fprintf(&b, "kernel --name kernel %s %s || goto failed\n", kernel, cmdline)
	fmt.Fprintf(&b, "initrd --name %s %s || goto failed\n", initrdName, initrd)
	b.WriteString("boot ||\n")
	b.WriteString(":failed\n")
	writeRetry(&b, base, "the ramdisk boot failed", retry)
	return b.String()
}

// sanbootScript boots a cached image over HTTP; several base URLs make one
// multipath sanboot line (iPXE tries each URI of a sanboot line in turn).
func sanbootScript(bases []string, digestHex string, retry time.Duration) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "# siteboot: sanboot of cached image sha256:%s\n", digestHex)
	b.WriteString("sanboot --no-describe")
	for _, base := range bases {
		fmt.Fprintf(&b, " %s/cache/%s", base, digestHex)
	}
	b.WriteString(" ||\n")
	writeRetry(&b, bases[0], "sanboot failed", retry)
	return b.String()
}

// chainScript hands the machine to its entry's own script URL.
func chainScript(base, url string, retry time.Duration) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	b.WriteString("# siteboot: this machine's script is its entry's ipxe_script_url\n")
	fmt.Fprintf(&b, "chain --autofree --replace %s ||\n", url)
	writeRetry(&b, base, "fetching "+url+" failed", retry)
	return b.String()
}

// unknownScript tells a machine without a live entry so, and asks again
// later.
func unknownScript(base, mac string, retry time.Duration) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "echo siteboot: machine %s is not registered at this site\n", mac)
	writeRetry(&b, base, "not registered", retry)
	return b.String()
}

func writeRetry(b *strings.Builder, base, what string, retry time.Duration) {
	fmt.Fprintf(b, "echo siteboot: %s; asking again in %d seconds\n", what, seconds(retry))
	fmt.Fprintf(b, "sleep %d\n", seconds(retry))
	fmt.Fprintf(b, "chain --autofree --replace %s/boot.ipxe\n", base)
}

// seconds rounds d up to whole seconds, at least 1.
func seconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	return max(s, 1)
}
