package logbuf

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Logger().Info("served", "file", "undionly.kpxe")
			}
		})
	}
	wg.Wait()
	b.Logger().Warn("refused", "file", "x")
	if n := len(b.Lines("served")); n != 800 {
		t.Fatalf("%d served lines, want 800", n)
	}
	if diff := cmp.Diff(1, len(b.Lines("refused", "file=x"))); diff != "" {
		t.Fatalf("refused lines (-want +got):\n%s", diff)
	}
	if b.Len() != len(b.String()) || len(b.Lines()) != 801 {
		t.Fatalf("Len %d, String %d bytes, %d lines", b.Len(), len(b.String()), len(b.Lines()))
	}
}
