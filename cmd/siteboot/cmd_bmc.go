package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/siteboot/siteboot/bmc"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
	"github.com/spf13/cobra"
)

type bmcFlags struct {
	driver, address, credentialsRef, args, spki, driverOptions string
	persistent, efi                                            bool
}

func newBmcCmd(cl *clientOptions) *cobra.Command {
	return newBmcCmdRunning(cl, func(cmd *cobra.Command, req *sitev1.BmcOperationRequest) error {
		if err := checkOutput(cl); err != nil {
			return err
		}
		res, err := relayCall(cmd, cl, bmc.MaxTimeout+relayMargin, func(ctx context.Context, api sitebootv1.SiteBootClient) (*sitev1.BmcOperationResult, error) {
			return api.BmcOperation(ctx, req)
		})
		if err != nil {
			return err
		}
		return printBmcResult(cmd.OutOrStdout(), cl.output, res)
	})
}

// newBmcCmdRunning is the bmc command handing its request to run.
func newBmcCmdRunning(cl *clientOptions, run func(*cobra.Command, *sitev1.BmcOperationRequest) error) *cobra.Command {
	var f bmcFlags
	c := &cobra.Command{
		Use:     "bmc --driver ipmi|redfish --address ADDR --credentials-ref REF OPERATION [VALUE]",
		Short:   "Run one operation on a BMC in bmc.networks: power, boot device, virtual media, inspect",
		Long:    bmcLong,
		Example: bmcExample,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd, args)
			if err != nil {
				return err
			}
			return run(cmd, req)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.driver, "driver", "", "the BMC driver: ipmi or redfish (only this one is tried)")
	fl.StringVar(&f.address, "address", "", "the BMC: HOST, HOST:PORT or (redfish) https://HOST[:PORT]; it must lie in bmc.networks")
	fl.StringVar(&f.credentialsRef, "credentials-ref", "", `secret ref of {"username": …, "password": …}: file:///PATH (under secrets.dir) or env://NAME`)
	fl.StringVar(&f.args, "args", "", "the operation's arguments as a JSON object (instead of VALUE)")
	fl.StringVar(&f.spki, "spki-sha256", "", "redfish: pin the BMC certificate's SubjectPublicKeyInfo SHA-256 (64 hex digits)")
	fl.StringVar(&f.driverOptions, "driver-options", "", `driver options as a JSON object, e.g. '{"cipherSuite": 3}' (ipmi)`)
	fl.BoolVar(&f.persistent, "persistent", false, "management.setBootDevice VALUE: boot from it every time, not the next boot only")
	fl.BoolVar(&f.efi, "efi", false, "management.setBootDevice VALUE: an EFI boot")
	for _, name := range []string{"driver", "address", "credentials-ref"} {
		_ = c.MarkFlagRequired(name)
	}
	return c
}

// request builds the BmcOperationRequest from the flags and OPERATION
// [VALUE]. The appliance validates what it holds; here only what the
// command line itself adds: VALUE, its flags, the pin's encoding.
func (f *bmcFlags) request(cmd *cobra.Command, args []string) (*sitev1.BmcOperationRequest, error) {
	op := args[0]
	bootFlags := cmd.Flags().Changed("persistent") || cmd.Flags().Changed("efi")
	argsJSON := f.args
	if len(args) == 2 {
		if cmd.Flags().Changed("args") {
			return nil, fmt.Errorf("%s: give its VALUE %q or --args, not both", op, args[1])
		}
		v, err := f.shorthand(op, args[1], bootFlags)
		if err != nil {
			return nil, err
		}
		argsJSON = v
	} else if bootFlags {
		return nil, fmt.Errorf("--persistent and --efi go with management.setBootDevice DEVICE; with --args put them into the JSON")
	}
	if err := checkRef("--credentials-ref", f.credentialsRef); err != nil {
		return nil, err
	}
	pin, err := parseSPKI(f.spki)
	if err != nil {
		return nil, err
	}
	return &sitev1.BmcOperationRequest{
		Driver: f.driver, Address: f.address, CredentialsRef: f.credentialsRef, Operation: op,
		ArgsJson: argsJSON, TlsSpkiSha256: pin, DriverOptionsJson: f.driverOptions,
	}, nil
}

// shorthand turns OPERATION VALUE into the operation's args_json.
func (f *bmcFlags) shorthand(op, value string, bootFlags bool) (string, error) {
	if bootFlags && op != "management.setBootDevice" {
		return "", fmt.Errorf("--persistent and --efi go with management.setBootDevice, not %s", op)
	}
	var args map[string]any
	switch op {
	case "power.setPower":
		args = map[string]any{"state": value}
	case "management.setBootDevice":
		args = map[string]any{"device": value}
		if f.persistent {
			args["persistent"] = true
		}
		if f.efi {
			args["efi"] = true
		}
	case "virtual-media.insert":
		args = map[string]any{"kind": "CD", "url": value}
	default:
		return "", fmt.Errorf("%s takes no VALUE (%q); give its arguments with --args JSON", op, value)
	}
	b, err := json.Marshal(args) // keys sorted: canonical
	return string(b), err
}

// printBmcResult prints a result: its fields, one per line, or the whole
// message with -o json. A failed operation is a *relayFailure.
func printBmcResult(w io.Writer, output string, res *sitev1.BmcOperationResult) error {
	if output == "json" {
		if err := printJSON(w, res); err != nil {
			return err
		}
	} else if res.GetOk() {
		if err := printResultFields(w, res.GetResultJson()); err != nil {
			return err
		}
	}
	if res.GetOk() {
		return nil
	}
	code := res.GetErrorCode()
	if code == "" {
		code = relayerr.Internal
	}
	return &relayFailure{line: "bmc: " + code + ": " + res.GetMessage()}
}

// printResultFields prints a JSON object's fields as "key: value", in key
// order, strings unquoted, other values as compact JSON; anything but an
// object as it is.
func printResultFields(w io.Writer, resultJSON string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(resultJSON), &fields); err != nil || fields == nil {
		_, err := fmt.Fprintln(w, resultJSON)
		return err
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		var s string
		if json.Unmarshal(v, &s) != nil {
			var buf bytes.Buffer
			if json.Compact(&buf, v) == nil {
				v = buf.Bytes()
			}
			s = string(v)
		}
		if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
			s = strconv.Quote(s) // a BMC's text never moves the terminal
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", k, s); err != nil {
			return err
		}
	}
	return nil
}

// bmcLong and bmcExample are `siteboot bmc --help`.
const bmcLong = `Run one operation on a BMC (the BmcOperation RPC). The appliance dials the
BMC itself, with the named driver only; it is not forwarded to another
appliance and needs no boot lease.

The BMC's address must lie in the appliance's bmc.networks: any other address
(or every address, when bmc.networks is empty) is refused with
forbidden-target before a packet is sent. ADDR is, for ipmi, HOST or
HOST:PORT (port 623); for redfish HOST, HOST:PORT or https://HOST[:PORT]
(port 443). A name is resolved once and every address it gives must pass.

The credentials never appear on the command line: --credentials-ref names a
secret on the appliance (file:///PATH under secrets.dir, env://NAME starting
with secrets.env_prefix) that holds {"username": "...", "password": "..."}.
The appliance reads it for the operation and never logs or returns it.

OPERATION and its VALUE (a shorthand for --args JSON; not both):
  power.getPower                                 prints power: on|off
  power.setPower on|off|soft|reset|cycle         {"state": VALUE}
  management.setBootDevice pxe|disk|cdrom|bios   {"device": VALUE}, with
      --persistent (every boot, not the next only) and --efi
  virtual-media.insert URL                       {"kind": "CD", "url": URL};
      other kinds (DVD, Floppy, USBStick) through --args
  virtual-media.eject                            --args '{"kind": "CD"}' (default)
  inspect.inspect                                power, vendor, model,
      serial, firmware, as far as the driver tells

--driver-options passes per-BMC driver options as JSON; unknown keys are
refused: ipmi {"cipherSuite": 0..17, "port": N} (without cipherSuite 3 is
tried, then 17), redfish {"port": N}; a port comes from ADDR or the options,
not both. Virtual media is redfish only; inspect.inspect gives the power
state with ipmi, and vendor, model, serial and firmware too with redfish.
--spki-sha256 pins a redfish BMC's certificate (the SHA-256 of its
SubjectPublicKeyInfo); without a pin the BMC's certificate is not verified,
as BMCs ship self-signed ones.

The result is printed one field per line (power: on); -o json prints the
whole BmcOperationResult. A failed operation prints "bmc: CODE: MESSAGE" on
stderr and exits 1. CODE is one of forbidden-target, invalid-args,
unsupported, credentials-unavailable, unreachable, auth-failed,
pin-mismatch, tls-failed, timeout, busy, bmc-error, internal.`

const bmcExample = `  # the secret: {"username": "admin", "password": "..."} in secrets.dir
  siteboot bmc --driver ipmi --address 10.20.0.11 --credentials-ref file:///etc/siteboot/secrets/bmc-11.json power.getPower
  siteboot bmc --driver ipmi --address 10.20.0.11:623 --credentials-ref env://SITEBOOT_SECRET_BMC11 power.setPower on
  siteboot bmc --driver ipmi --address 10.20.0.11 --credentials-ref env://SITEBOOT_SECRET_BMC11 \
      management.setBootDevice pxe --persistent --efi
  siteboot bmc --driver ipmi --address 10.20.0.11 --credentials-ref env://SITEBOOT_SECRET_BMC11 \
      --driver-options '{"cipherSuite": 3}' power.setPower cycle
  siteboot bmc --driver redfish --address https://10.20.0.12 --credentials-ref env://SITEBOOT_SECRET_BMC12 \
      --spki-sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 \
      virtual-media.insert https://10.0.0.2:8080/cache/HEX
  siteboot bmc --driver redfish --address 10.20.0.12 --credentials-ref env://SITEBOOT_SECRET_BMC12 \
      --args '{"kind": "CD"}' virtual-media.eject
  siteboot bmc --driver redfish --address 10.20.0.12 --credentials-ref env://SITEBOOT_SECRET_BMC12 -o json inspect.inspect`
