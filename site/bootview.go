package site

import (
	"encoding/hex"

	"github.com/siteboot/siteboot/bootentry"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
)

// bootView is the boot path's read model of a stored entry, built once when
// the entry is stored or restored so that a lookup on the DHCP path copies
// a struct and converts nothing.
func bootView(se *statev1.StoredEntry) bootentry.Entry {
	e := se.GetEntry()
	v := bootentry.Entry{
		NodeID:            se.GetNodeId(),
		MAC:               e.GetMac(),
		ProductUUID:       e.GetProductUuid(),
		Arch:              bootentry.ArchName(e.GetArch()),
		WorkflowID:        e.GetWorkflowId(),
		BootFile:          e.GetBootFile(),
		IPXEScriptURL:     e.GetIpxeScriptUrl(),
		DiscoveryTokenRef: e.GetDiscoveryTokenRef(),
		NotAfter:          e.GetNotAfter().AsTime(),
	}
	if d := e.GetSanbootSha256(); len(d) > 0 {
		v.SanbootSHA256 = hex.EncodeToString(d)
	}
	return v
}
