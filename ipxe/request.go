package ipxe

import (
	"fmt"
	"net/netip"
	"net/url"

	"github.com/siteboot/siteboot/bootentry"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// Bounds on a request.
const (
	maxQueryLen  = 2048
	maxTokenLen  = 16 // buildarch, platform
	maxSMBIOSLen = 256
)

// parseQuery reads the /ipxe query (mac, uuid, buildarch, platform, serial,
// asset). Unknown keys are ignored; a repeated key is refused, so no two
// readers can disagree on which value counts. The ip key is ignored: the
// handler vouches only for the address it sees.
func parseQuery(raw string) (*sitev1.IpxeScriptRequest, error) {
	if len(raw) > maxQueryLen {
		return nil, &RequestError{Field: "query", Reason: fmt.Sprintf("longer than %d bytes", maxQueryLen)}
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, &RequestError{Field: "query", Reason: "malformed query string"}
	}
	req := &sitev1.IpxeScriptRequest{}
	fields := []struct {
		name string
		dst  *string
	}{
		{"mac", &req.Mac}, {"uuid", &req.Uuid}, {"buildarch", &req.Buildarch},
		{"platform", &req.Platform}, {"serial", &req.Serial}, {"asset", &req.Asset},
	}
	for _, f := range fields {
		vs := q[f.name]
		if len(vs) > 1 {
			return nil, &RequestError{Field: f.name, Reason: "given more than once"}
		}
		if len(vs) == 1 {
			*f.dst = vs[0]
		}
	}
	return req, nil
}

// normalize checks every field of req and returns a normalised copy: MAC in
// lowercase colon form, UUID lowercase 8-4-4-4-12, IP in canonical form.
func normalize(req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScriptRequest, error) {
	if req.GetMac() == "" {
		return nil, &RequestError{Field: "mac", Reason: "is required"}
	}
	mac, err := bootentry.NormalizeMAC(req.GetMac())
	if err != nil {
		return nil, &RequestError{Field: "mac", Reason: err.Error()}
	}
	n := &sitev1.IpxeScriptRequest{Mac: mac}
	if req.GetUuid() != "" {
		if n.Uuid, err = bootentry.NormalizeUUID(req.GetUuid()); err != nil {
			return nil, &RequestError{Field: "uuid", Reason: err.Error()}
		}
		// The SMBIOS "no UUID" values identify nothing: they count as none.
		if bootentry.IsPlaceholderUUID(n.Uuid) {
			n.Uuid = ""
		}
	}
	if req.GetIp() != "" {
		ip, err := netip.ParseAddr(req.GetIp())
		if err != nil {
			return nil, &RequestError{Field: "ip", Reason: fmt.Sprintf("%q is not an IP address", req.GetIp())}
		}
		n.Ip = ip.Unmap().String()
	}
	for _, f := range []struct{ name, val string }{{"buildarch", req.GetBuildarch()}, {"platform", req.GetPlatform()}} {
		if err := checkWord(f.name, f.val); err != nil {
			return nil, err
		}
	}
	n.Buildarch, n.Platform = req.GetBuildarch(), req.GetPlatform()
	for _, f := range []struct{ name, val string }{{"serial", req.GetSerial()}, {"asset", req.GetAsset()}} {
		if err := checkSMBIOS(f.name, f.val); err != nil {
			return nil, err
		}
	}
	n.Serial, n.Asset = req.GetSerial(), req.GetAsset()
	return n, nil
}

// checkWord accepts iPXE's ${buildarch} and ${platform}: up to 16 of
// a-z 0-9 _.
func checkWord(field, s string) error {
	if len(s) > maxTokenLen {
		return &RequestError{Field: field, Reason: fmt.Sprintf("longer than %d characters", maxTokenLen)}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return &RequestError{Field: field, Reason: fmt.Sprintf("%q has character %q; allowed are a-z 0-9 _", s, c)}
		}
	}
	return nil
}

// checkSMBIOS accepts an SMBIOS string (serial, asset tag): it is only
// logged, never placed in a script, so anything but control characters
// goes, up to 256 bytes.
func checkSMBIOS(field, s string) error {
	if len(s) > maxSMBIOSLen {
		return &RequestError{Field: field, Reason: fmt.Sprintf("longer than %d bytes", maxSMBIOSLen)}
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return &RequestError{Field: field, Reason: "has a control character"}
		}
	}
	return nil
}

// archName names the client's architecture the way DiscoveredMachine.arch
// does, from iPXE's ${buildarch} and ${platform}; "" when unknown.
func archName(buildarch, platform string) string {
	switch {
	case platform == "pcbios":
		return "bios"
	case platform != "efi":
		return ""
	case buildarch == "x86_64":
		return "x86_64-efi"
	case buildarch == "arm64":
		return "arm64-efi"
	case buildarch == "i386":
		return "x86-efi"
	case buildarch == "arm32":
		return "arm32-efi"
	default:
		return ""
	}
}
