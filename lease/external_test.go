package lease

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/proto"
)

// startExternal opens an external-mode node on dir and runs it until it is
// ready (its log replayed); its gate stays closed until a push.
func startExternal(t *testing.T, dir string, reg *prometheus.Registry) *harness {
	t.Helper()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	st := site.NewState()
	n, err := Open(Config{Mode: External, Dir: dir, ID: "appliance-1", StateMachine: st, Logger: quietLog(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return run(t, dir, n, st)
}

func push(h *harness, epoch uint64, ttl time.Duration, active bool) (Status, error) {
	return h.node.UpdateLease(context.Background(), &sitev1.BootLeaseState{Active: active, Epoch: epoch, TtlMs: uint32(ttl.Milliseconds())})
}

func TestExternalLease(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	h := startExternal(t, dir, reg)
	if _, open := h.node.Gate(); open {
		t.Fatal("gate open before any push")
	}
	if st := h.node.Status(); st.Active || !strings.Contains(st.FencedReason, "no lease pushed") || st.Mode != External {
		t.Fatalf("before the first push: %+v", st)
	}

	t0 := time.Now()
	st, err := push(h, 5, 400*time.Millisecond, true)
	if err != nil {
		t.Fatal(err)
	}
	if e, open := h.node.Gate(); !open || e != 5 {
		t.Fatalf("after push: Gate() = %d, %t; want 5, true", e, open)
	}
	if !st.Active || st.Epoch != 5 || st.TTL != 400*time.Millisecond || st.Holder != "" ||
		st.ValidUntil.Before(t0.Add(400*time.Millisecond)) || st.ValidUntil.After(time.Now().Add(400*time.Millisecond)) {
		t.Fatalf("status after push = %+v", st)
	}
	if ls := h.node.LeaseState(); !ls.GetActive() || ls.GetEpoch() != 5 || ls.GetTtlMs() != 400 {
		t.Fatalf("LeaseState = %v", ls)
	}

	// Renewals with the same epoch carry the window past its first end.
	for end := t0.Add(time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := push(h, 5, 400*time.Millisecond, true); err != nil {
			t.Fatal(err)
		}
		if _, open := h.node.Gate(); !open {
			t.Fatal("gate closed between renewals")
		}
	}

	// A lower epoch is refused and changes nothing.
	before := h.node.Status()
	_, err = push(h, 4, time.Minute, true)
	var ee *EpochError
	if !errors.As(err, &ee) || ee.Got != 4 || ee.Highest != 5 {
		t.Fatalf("push of epoch 4 = %v; want EpochError{4, 5}", err)
	}
	if after := h.node.Status(); after.Epoch != 5 || !after.ValidUntil.Equal(before.ValidUntil) || after.TTL != before.TTL {
		t.Fatalf("a refused push changed the lease: %+v -> %+v", before, after)
	}

	// active=false fences at once.
	if st, err := push(h, 5, 400*time.Millisecond, false); err != nil || st.Active || !strings.Contains(st.FencedReason, "active=false") {
		t.Fatalf("inactive push = %+v, %v", st, err)
	}
	if _, open := h.node.Gate(); open {
		t.Fatal("gate open after an inactive push")
	}
	if got := fenceEvents(t, reg, fenceInactive); got != 1 {
		t.Fatalf("fence events inactive = %v; want 1", got)
	}

	// A higher epoch opens again; without a renewal it fences after ttl.
	if _, err := push(h, 9, 300*time.Millisecond, true); err != nil {
		t.Fatal(err)
	}
	if e, open := h.node.Gate(); !open || e != 9 {
		t.Fatalf("after epoch 9: Gate() = %d, %t", e, open)
	}
	waitFor(t, func() bool { _, open := h.node.Gate(); return !open })
	waitFor(t, func() bool { return fenceEvents(t, reg, fenceExpired) == 1 })
	if st := h.node.Status(); !strings.Contains(st.FencedReason, "without a renewal") || st.FenceEvents != 2 {
		t.Fatalf("after the ttl ran out: %+v", st)
	}
	if got := metricValue(t, reg, "siteboot_lease_epoch", ""); got != 9 {
		t.Fatalf("siteboot_lease_epoch = %v; want 9", got)
	}
	h.close()

	// The highest epoch survives a restart: from the log, then from a
	// snapshot.
	for _, snapshot := range []bool{false, true} {
		h := startExternal(t, dir, nil)
		if _, open := h.node.Gate(); open {
			t.Fatal("gate open after a restart, before any push")
		}
		_, err := push(h, 8, time.Second, true)
		if !errors.As(err, &ee) || ee.Got != 8 || ee.Highest != 9 {
			h.close()
			t.Fatalf("after restart (snapshot %t): push of epoch 8 = %v; want EpochError{8, 9}", snapshot, err)
		}
		if _, err := push(h, 9, time.Second, true); err != nil {
			t.Fatalf("renewal of epoch 9 after restart: %v", err)
		}
		if snapshot {
			h.close()
			continue
		}
		if err := h.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
		h.close()
	}
}

func TestExternalRefusesBadPushes(t *testing.T) {
	h := startExternal(t, t.TempDir(), nil)
	defer h.close()
	tests := []struct {
		name  string
		ls    *sitev1.BootLeaseState
		field string
	}{
		{"no ttl", &sitev1.BootLeaseState{Active: true, Epoch: 1}, "ttl_ms"},
		{"ttl above 10m", &sitev1.BootLeaseState{Active: true, Epoch: 1, TtlMs: uint32((10*time.Minute + time.Millisecond).Milliseconds())}, "ttl_ms"},
		{"epoch 0", &sitev1.BootLeaseState{Active: true, TtlMs: 1000}, "epoch"},
		{"nil", nil, "ttl_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.node.UpdateLease(context.Background(), tt.ls)
			var ue *UpdateError
			if !errors.As(err, &ue) || ue.Field != tt.field {
				t.Fatalf("UpdateLease = %v; want an UpdateError for %s", err, tt.field)
			}
			if st := h.node.Status(); st.Epoch != 0 || st.Active {
				t.Fatalf("a refused push changed the lease: %+v", st)
			}
		})
	}
	if _, err := push(h, 1, 10*time.Minute, true); err != nil {
		t.Fatalf("a 10m ttl (the bound) was refused: %v", err)
	}
}

// The external epoch is applied only upwards, snapshotted and restored,
// and a snapshot that would lower it is refused.
func TestExternalEpochRules(t *testing.T) {
	f := newFSM(site.NewState(), quietLog(), newSkippedCounter())
	apply := func(i, e uint64) uint64 {
		data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_ExternalEpoch{ExternalEpoch: &statev1.ExternalEpoch{Epoch: e}}})
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: data}).(externalResult).highest
	}
	var got []uint64
	for i, e := range []uint64{3, 2, 0, 7, 7, 1 << 63} {
		got = append(got, apply(uint64(i+1), e))
	}
	if diff := cmp.Diff([]uint64{3, 3, 3, 7, 7, 1 << 63}, got); diff != "" {
		t.Fatalf("highest after each entry (-want +got):\n%s", diff)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	fresh := newFSM(site.NewState(), quietLog(), newSkippedCounter())
	if err := fresh.Restore(io.NopCloser(bytes.NewReader(snap.(snapshot)))); err != nil || fresh.externalEpoch() != 1<<63 {
		t.Fatalf("restore: %v, external epoch %d", err, fresh.externalEpoch())
	}
	low, err := proto.Marshal(&statev1.Snapshot{ExternalEpoch: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Restore(io.NopCloser(bytes.NewReader(low))); err == nil || fresh.externalEpoch() != 1<<63 {
		t.Fatalf("a snapshot lowering the external epoch: %v, now %d; want refused", err, fresh.externalEpoch())
	}
}
