package admin

import (
	"time"

	"github.com/siteboot/siteboot/appliance"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The core's domain values as the API's messages.

func entriesAPI(entries []appliance.Entry) []*sitebootv1.Entry {
	out := make([]*sitebootv1.Entry, 0, len(entries))
	for _, e := range entries {
		out = append(out, &sitebootv1.Entry{NodeId: e.NodeID, Entry: e.Entry, CreatedAt: timestamp(e.CreatedAt), Live: e.Live})
	}
	return out
}

func imagesAPI(imgs []appliance.Image) []*sitebootv1.Image {
	out := make([]*sitebootv1.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, imageAPI(img))
	}
	return out
}

func imageAPI(in appliance.Image) *sitebootv1.Image {
	return &sitebootv1.Image{
		Sha256: append([]byte(nil), in.SHA256[:]...), Url: in.URL, Format: in.Format,
		State: in.State.String(), ContractState: in.State.Proto(),
		SizeBytes: uint64(max(in.Size, 0)), DoneBytes: uint64(max(in.Done, 0)), Reason: in.Reason,
		Pinned: in.Pinned, Readers: uint32(max(in.Readers, 0)), LastUsed: timestamp(in.LastUsed),
		InSpec: in.InSpec, Added: in.Added, Compression: in.Compression,
	}
}

func statusAPI(st appliance.Status) *sitebootv1.GetStatusResponse {
	out := &sitebootv1.GetStatusResponse{
		SiteId: st.SiteID, NodeId: st.NodeID, Version: st.Version, StartedAt: timestamp(st.StartedAt),
		Ready: st.Ready, NotReadyReason: st.NotReady,
		Entries: uint32(st.Entries), LiveEntries: uint32(st.LiveEntries), Nodes: uint32(st.Nodes),
		Lease: st.Lease, LeaseMode: st.LeaseMode, RaftState: st.RaftState, AppliedIndex: st.AppliedIndex,
		BootFilesDir: st.BootFilesDir, Discovered: uint32(st.Discovered),
		NodeKeyId: st.NodeKeyID, NodePublicKeyPem: string(st.NodeKeyPEM), Images: st.Images,
		LeaseStatus: leaseStatusAPI(st.LeaseStatus),
	}
	for _, f := range st.BootFiles {
		out.BootFiles = append(out.BootFiles, &sitebootv1.BootFile{Name: f.Name, Arches: f.Arches, Size: uint64(f.Size), Sha256: f.SHA256[:]})
	}
	for _, l := range st.Listeners {
		out.Listeners = append(out.Listeners, &sitebootv1.Listener{Service: l.Service, Address: l.Address})
	}
	return out
}

// timestamp is t as a Timestamp; nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
