package lease

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
)

func TestEpochRules(t *testing.T) {
	f := newFSM(site.NewState(), quietLog(), newSkippedCounter())
	index := uint64(0)
	epoch := func(e uint64, holder string) epochResult {
		t.Helper()
		data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_LeaseEpoch{LeaseEpoch: &statev1.LeaseEpoch{Epoch: e, Holder: holder}}})
		if err != nil {
			t.Fatal(err)
		}
		index++
		res, ok := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(epochResult)
		if !ok {
			t.Fatalf("epoch %d: result is not an epochResult", e)
		}
		return res
	}
	steps := []struct {
		epoch  uint64
		holder string
		want   epochResult
	}{
		{1, "appliance-1", epochResult{1, "appliance-1"}},
		{2, "appliance-2", epochResult{2, "appliance-2"}},
		{2, "appliance-1", epochResult{2, "appliance-2"}},              // stale
		{math.MaxUint64, "appliance-1", epochResult{2, "appliance-2"}}, // a jump that would exhaust the counter
		{3, "evil node!", epochResult{2, "appliance-2"}},               // not a server id
		{3, "", epochResult{2, "appliance-2"}},
		{3, "appliance-1", epochResult{3, "appliance-1"}},
	}
	for i, s := range steps {
		if diff := cmp.Diff(s.want, epoch(s.epoch, s.holder), cmp.AllowUnexported(epochResult{})); diff != "" {
			t.Errorf("step %d (epoch %d %q) (-want +got):\n%s", i, s.epoch, s.holder, diff)
		}
	}
	var m dto.Metric
	if err := f.skipped.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Fatalf("skipped = %v; want 3 (the jump and two bad holders; a stale epoch is routine)", got)
	}
	if _, failed := f.Apply(&raft.Log{Index: 99, Type: raft.LogCommand, Data: []byte{0xff}}).(error); !failed {
		t.Fatal("an undecodable log entry did not fail")
	}
}
