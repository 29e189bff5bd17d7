package imagecache

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// hookCtx runs hook the n-th time Err is called: fileHasDigest asks before
// every chunk it hashes, so the hook runs between two chunks.
type hookCtx struct {
	context.Context
	n    int
	hook func()
}

func (c *hookCtx) Err() error {
	if c.n--; c.n == 0 {
		c.hook()
	}
	return c.Context.Err()
}

// A blob written to while it is hashed is not reported as verified, even
// though the bytes hashed match the digest: the record the caller keeps
// would otherwise name a file whose bytes were never hashed.
func TestFileHasDigestSeesAChangeWhileHashing(t *testing.T) {
	data := testBytes(90, 2*hashChunk+100)
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := &hookCtx{Context: context.Background(), n: 2, hook: func() { corrupt(t, path, 0) }}
	st, ok, err := fileHasDigest(ctx, path, digestOf(data), -1, nil)
	if err == nil {
		t.Fatalf("fileHasDigest = %+v, %t, nil; want an error for a file changed while it was hashed", st, ok)
	}
	// Untouched, the same file verifies, with the stamp of the file.
	data = testBytes(91, 2*hashChunk+100)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := stampOf(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok, err = fileHasDigest(context.Background(), path, digestOf(data), -1, nil)
	if err != nil || !ok || st != want {
		t.Errorf("fileHasDigest of an untouched file = %+v, %t, %v; want %+v, true, nil", st, ok, err, want)
	}
}
