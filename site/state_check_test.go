package site

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// logBuffer is a State logger that keeps its lines.
type logBuffer struct{ bytes.Buffer }

func (b *logBuffer) lines() []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func loggedState() (*State, *logBuffer) {
	var buf logBuffer
	return NewState(WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))), &buf
}

func live(mac string) *sitev1.ProxyDhcpEntry {
	return &sitev1.ProxyDhcpEntry{Mac: mac, NotAfter: timestamppb.New(testNow.Add(time.Hour))}
}

func putCmd(t testing.TB, node string, entries ...*sitev1.ProxyDhcpEntry) []byte {
	b, err := proto.Marshal(&statev1.SiteCommand{At: timestamppb.New(testNow),
		Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: node, Entries: entries}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func with(e *sitev1.ProxyDhcpEntry, mod func(*sitev1.ProxyDhcpEntry)) *sitev1.ProxyDhcpEntry {
	mod(e)
	return e
}

func skippedCount(st *State, what string) float64 {
	var m dto.Metric
	if err := st.skipped.WithLabelValues(what).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestApplySkipsInvalidEntries(t *testing.T) {
	st, logs := loggedState()
	res := st.ApplyCommand(putCmd(t, "n1",
		live("52:54:00:00:00:01"),
		with(live("52:54:00:00:00:02"), func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../../../etc/passwd" }),
		with(live("52:54:00:00:00:03"), func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://${next-server}/chain.ipxe" }),
		with(live("52:54:00:00:00:04"), func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "https://u:pw@evil.example/chain" }),
		with(live("52-54-00-00-00-05"), func(e *sitev1.ProxyDhcpEntry) { e.WorkflowId = "wf 1" }),
		&sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:06"}, // no not_after
		live("5254.0000.0001"), // the first entry's MAC again
		with(live("52:54:00:00:00:07"), func(e *sitev1.ProxyDhcpEntry) { e.ProductUuid = "4C4C4544-0047-3510-8052-B4C04F4E3832" }),
	))
	put, ok := res.(*PutResult)
	if !ok {
		t.Fatalf("ApplyCommand = %v; want a *PutResult", res)
	}
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:07"}, macsOf(put.Stored)); diff != "" {
		t.Fatalf("stored (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01", "n1/52:54:00:00:00:07"}, macsOf(st.List(""))); diff != "" {
		t.Fatalf("state (-want +got):\n%s", diff)
	}
	if got := st.List("")[1].GetEntry().GetProductUuid(); got != "4c4c4544-0047-3510-8052-b4c04f4e3832" {
		t.Fatalf("product_uuid stored as %q; want it normalised as the API does", got)
	}
	lines := logs.lines()
	wantFields := []string{"entries[1].boot_file", "entries[2].ipxe_script_url", "entries[3].ipxe_script_url",
		"entries[4].workflow_id", "entries[5].not_after", "entries[6].mac"}
	if len(lines) != len(wantFields) {
		t.Fatalf("log lines:\n%s\nwant one per skipped entry (%d)", logs.String(), len(wantFields))
	}
	for i, f := range wantFields {
		if !strings.Contains(lines[i], "field="+f) || !strings.Contains(lines[i], "node=n1") || !strings.Contains(lines[i], "reason=") {
			t.Errorf("log line %d = %q; want it to name node n1, field %s and a reason", i, lines[i], f)
		}
		if strings.Contains(lines[i], "chain.ipxe") && f != "entries[2].ipxe_script_url" {
			t.Errorf("log line %d carries another entry's payload: %q", i, lines[i])
		}
	}
	if strings.Contains(logs.String(), "pw@") {
		t.Error("a skipped URL's credentials were logged")
	}
	if got := skippedCount(st, "entry"); got != float64(len(wantFields)) {
		t.Fatalf("skipped entries counted %v; want %d", got, len(wantFields))
	}
}

func TestApplySkippedLinesAreBounded(t *testing.T) {
	st, logs := loggedState()
	var bad []*sitev1.ProxyDhcpEntry
	for range MaxEntriesPerRequest {
		bad = append(bad, &sitev1.ProxyDhcpEntry{Mac: strings.Repeat("x", 10000)})
	}
	if res, ok := st.ApplyCommand(putCmd(t, "n1", bad...)).(*PutResult); !ok || len(res.Stored) != 0 {
		t.Fatalf("ApplyCommand = %v; want an empty *PutResult", res)
	}
	lines := logs.lines()
	if len(lines) != maxSkipLines+1 || !strings.Contains(lines[maxSkipLines], "count=248") {
		t.Fatalf("%d log lines, last %q; want %d lines and a count of the rest", len(lines), lines[len(lines)-1], maxSkipLines+1)
	}
	for _, l := range lines {
		if len(l) > 2*maxReasonLen+200 {
			t.Fatalf("log line of %d bytes: the reason is not clipped", len(l))
		}
	}
}

func TestApplyRefusesInvalidCommandsWhole(t *testing.T) {
	at := timestamppb.New(testNow)
	cmd := func(op func(*statev1.SiteCommand)) *statev1.SiteCommand {
		c := &statev1.SiteCommand{At: at}
		op(c)
		return c
	}
	put := func(node string, entries ...*sitev1.ProxyDhcpEntry) func(*statev1.SiteCommand) {
		return func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: node, Entries: entries}}
		}
	}
	cleanUp := func(req *sitev1.BootCleanUpRequest) func(*statev1.SiteCommand) {
		return func(c *statev1.SiteCommand) { c.Op = &statev1.SiteCommand_CleanUp{CleanUp: req} }
	}
	expire := func(before *timestamppb.Timestamp) func(*statev1.SiteCommand) {
		return func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_ExpireEntries{ExpireEntries: &statev1.ExpireEntries{Before: before}}
		}
	}
	var tooMany []string
	for range MaxEntriesPerRequest + 1 {
		tooMany = append(tooMany, "52:54:00:00:00:01")
	}
	tests := []struct {
		name  string
		cmd   *statev1.SiteCommand
		field string
	}{
		{"evil node id", cmd(put("evil node!", live("52:54:00:00:00:09"))), "node_id"},
		{"no entries", cmd(put("n1")), "entries"},
		{"no at", func() *statev1.SiteCommand { c := cmd(put("n1", live("52:54:00:00:00:09"))); c.At = nil; return c }(), "at"},
		{"bad at", func() *statev1.SiteCommand {
			c := cmd(put("n1", live("52:54:00:00:00:09")))
			c.At = &timestamppb.Timestamp{Seconds: 1 << 62}
			return c
		}(), "at"},
		{"clean up evil node", cmd(cleanUp(&sitev1.BootCleanUpRequest{NodeId: "evil node!"})), "node_id"},
		{"clean up bad mac", cmd(cleanUp(&sitev1.BootCleanUpRequest{NodeId: "n1", Macs: []string{"x"}})), "macs[0]"},
		{"clean up too many", cmd(cleanUp(&sitev1.BootCleanUpRequest{NodeId: "n1", Macs: tooMany})), "macs"},
		{"expire without before", cmd(expire(nil)), "expire_entries.before"},
		{"expire after at", cmd(expire(timestamppb.New(testNow.Add(time.Hour)))), "expire_entries.before"},
		{"spec with ftp image", cmd(func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_ApplySiteSpec{ApplySiteSpec: &statev1.ApplySiteSpec{Spec: &sitev1.SiteSpec{
				CacheImages: []*sitev1.CacheImage{{Url: "ftp://evil.example/x", Sha256: digest(3)}}}}}
		}), "cache_images[0].url"},
		{"image with short digest", cmd(func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: &statev1.ImageWant{
				Image: &sitev1.CacheImage{Url: "https://h/x", Sha256: digest(3)[:5]}}}}
		}), "image.sha256"},
		// The image cache refuses the all-zero digest; held in the state it
		// would fail every sync of the wanted images, and the next start.
		{"image with zero digest", cmd(func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: &statev1.ImageWant{
				Image: &sitev1.CacheImage{Url: "https://h/x", Sha256: digest(0)}}}}
		}), "image.sha256"},
		{"image without image", cmd(func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{}}
		}), "image"},
		{"remove short digest", cmd(func(c *statev1.SiteCommand) {
			c.Op = &statev1.SiteCommand_RemoveImage{RemoveImage: &statev1.RemoveImage{Sha256: []byte{1}}}
		}), "sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, logs := loggedState()
			seed(t, st)
			before, _ := st.MarshalState()
			res := st.ApplyCommand(mustMarshal(t, tt.cmd))
			fe, ok := res.(*FieldError)
			if !ok || fe.Field != tt.field {
				t.Fatalf("ApplyCommand = %v; want a *FieldError on %s", res, tt.field)
			}
			after, _ := st.MarshalState()
			if !bytes.Equal(before, after) {
				t.Fatal("a refused command changed the state")
			}
			if got := skippedCount(st, "command"); got != 1 {
				t.Fatalf("refused commands counted %v; want 1", got)
			}
			if l := logs.lines(); len(l) != 1 || !strings.Contains(l[0], "field="+tt.field) {
				t.Fatalf("log = %q; want one line naming %s", logs.String(), tt.field)
			}
		})
	}
}

// seed puts two entries, a spec and a hand-added image into st.
func seed(t testing.TB, st *State) {
	at := timestamppb.New(testNow)
	for _, c := range []*statev1.SiteCommand{
		{At: at, Op: &statev1.SiteCommand_PutEntries{PutEntries: &statev1.PutEntries{NodeId: "n1",
			Entries: []*sitev1.ProxyDhcpEntry{live("52:54:00:00:00:01"), live("52:54:00:00:00:02")}}}},
		{At: at, Op: &statev1.SiteCommand_ApplySiteSpec{ApplySiteSpec: &statev1.ApplySiteSpec{Spec: &sitev1.SiteSpec{
			CacheImages: []*sitev1.CacheImage{img(1)}}}}},
		{At: at, Op: &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: &statev1.ImageWant{Image: img(2)}}}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err, failed := st.ApplyCommand(b).(error); failed {
			t.Fatalf("seed: %v", err)
		}
	}
}

// TestApplyAgreesWithTheAPI: an entry the API refuses (for a reason that
// needs no clock) is one the state machine skips, and the other way round,
// so a rule tightened in the API's validation tightens the log's too.
func TestApplyAgreesWithTheAPI(t *testing.T) {
	corpus := []func(*sitev1.ProxyDhcpEntry){
		func(*sitev1.ProxyDhcpEntry) {},
		func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../../../etc/passwd" },
		func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "efi/ipxe.efi" },
		func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "ipxe.efi ${x}" },
		func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://evil.example/chain.ipxe?mac=${net0/mac}" },
		func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://evil.example/a b" },
		func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "https://cp.example/ipxe/n1" },
		func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://${next-server}/x" },
		func(e *sitev1.ProxyDhcpEntry) { e.Mac = "01:00:5e:00:00:01" },
		func(e *sitev1.ProxyDhcpEntry) { e.Mac = "52:54:00:AA:BB:CC" },
		func(e *sitev1.ProxyDhcpEntry) { e.Arch = 77 },
		func(e *sitev1.ProxyDhcpEntry) { e.DiscoveryTokenRef = "plain-secret" },
		func(e *sitev1.ProxyDhcpEntry) { e.DiscoveryTokenRef = "env://BC_TOKEN" },
		func(e *sitev1.ProxyDhcpEntry) { e.WorkflowId = "wf;reboot" },
		func(e *sitev1.ProxyDhcpEntry) { e.SanbootSha256 = make([]byte, 33) },
		func(e *sitev1.ProxyDhcpEntry) { e.ProductUuid = "not-a-uuid" },
	}
	for i, mod := range corpus {
		e := with(live("52:54:00:00:00:01"), mod)
		_, apiErr := ValidateEntries("n1", []*sitev1.ProxyDhcpEntry{e}, testNow, testLimits)
		st := NewState()
		put, ok := st.ApplyCommand(putCmd(t, "n1", e)).(*PutResult)
		if !ok {
			t.Fatalf("corpus[%d]: ApplyCommand did not apply", i)
		}
		if stored := len(put.Stored) == 1; stored != (apiErr == nil) {
			t.Errorf("corpus[%d] %v: the API says %v, the state machine stored it: %t", i, e, apiErr, stored)
		}
	}
}

func TestRestoreSkipsInvalid(t *testing.T) {
	na := timestamppb.New(testNow.Add(time.Hour))
	stored := func(node string, e *sitev1.ProxyDhcpEntry) *statev1.StoredEntry {
		return &statev1.StoredEntry{NodeId: node, Entry: e, CreatedAt: timestamppb.New(testNow)}
	}
	snap := &statev1.SiteState{
		Entries: []*statev1.StoredEntry{
			stored("n1", live("52:54:00:00:00:01")),
			stored("evil node!", live("52:54:00:00:00:02")),
			stored("n1", with(live("52:54:00:00:00:03"), func(e *sitev1.ProxyDhcpEntry) { e.BootFile = "../../../etc/passwd" })),
			stored("n1", with(live("52:54:00:00:00:04"), func(e *sitev1.ProxyDhcpEntry) { e.IpxeScriptUrl = "http://${evil}/x" })),
			stored("n2", live("52:54:00:00:00:01")), // n1 holds it
			stored("n2", &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:05"}),
			stored("n2", nil),
			stored("n2", &sitev1.ProxyDhcpEntry{Mac: "52-54-00-00-00-06", NotAfter: na}),
		},
		Images: []*statev1.ImageWant{{Image: img(1)}, {Image: &sitev1.CacheImage{Url: "file:///etc/shadow", Sha256: digest(2)}}},
		Spec:   &sitev1.SiteSpec{CacheImages: []*sitev1.CacheImage{{Url: "https://h/x", Sha256: digest(4), Format: "a b"}}},
	}
	st, logs := loggedState()
	seed(t, st)
	if err := st.RestoreState(mustMarshal(t, snap)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01", "n2/52:54:00:00:00:06"}, macsOf(st.List(""))); diff != "" {
		t.Fatalf("restored entries (-want +got):\n%s", diff)
	}
	for _, se := range st.List("") {
		if err := ValidateStoredEntry(se); err != nil {
			t.Errorf("restored entry %v: %v", se, err)
		}
	}
	if got := len(st.HandAddedImages()); got != 1 {
		t.Fatalf("%d hand-added images restored; want 1 (the file:// one skipped)", got)
	}
	if got := len(st.Spec().GetCacheImages()); got != 0 {
		t.Fatalf("the invalid spec was restored: %v", st.Spec())
	}
	for what, want := range map[string]float64{"snapshot_entry": 6, "snapshot_image": 1, "snapshot_spec": 1} {
		if got := skippedCount(st, what); got != want {
			t.Errorf("skipped %s = %v; want %v", what, got, want)
		}
	}
	for _, f := range []string{"entries[1].node_id", "entries[2].entry.boot_file", "entries[3].entry.ipxe_script_url",
		"entries[4].entry.mac", "entries[5].entry.not_after", "entries[6].entry", "images[1].image.url", "spec.cache_images[0].format"} {
		if !strings.Contains(logs.String(), "field="+f+" ") {
			t.Errorf("no log line names %s:\n%s", f, logs.String())
		}
	}
	// Garbage changes nothing.
	before, _ := st.MarshalState()
	if err := st.RestoreState([]byte{0x0a, 0xff}); err == nil {
		t.Fatal("restore of garbage succeeded")
	}
	if after, _ := st.MarshalState(); !bytes.Equal(before, after) {
		t.Fatal("a failed restore changed the state")
	}
}

func TestValidateStoredEntry(t *testing.T) {
	ok := &statev1.StoredEntry{NodeId: "n1", Entry: live("52:54:00:00:00:01")}
	if err := ValidateStoredEntry(ok); err != nil {
		t.Fatal(err)
	}
	for name, se := range map[string]*statev1.StoredEntry{
		"not normalised": {NodeId: "n1", Entry: live("52-54-00-00-00-01")},
		"bad node":       {NodeId: "a b", Entry: live("52:54:00:00:00:01")},
		"no not_after":   {NodeId: "n1", Entry: &sitev1.ProxyDhcpEntry{Mac: "52:54:00:00:00:01"}},
		"bad created_at": {NodeId: "n1", Entry: live("52:54:00:00:00:01"), CreatedAt: &timestamppb.Timestamp{Nanos: -5}},
	} {
		var fe *FieldError
		if err := ValidateStoredEntry(se); !errors.As(err, &fe) {
			t.Errorf("%s: ValidateStoredEntry = %v; want a *FieldError", name, err)
		}
	}
}
