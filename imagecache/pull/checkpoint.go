package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/siteboot/siteboot/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// checkpoint is <hex>.ckpt next to <hex>.part: how far the data is durable
// and the SHA-256 state over exactly those bytes, with what identifies the
// origin's version (a resume must get the same one).
type checkpoint struct {
	Version   int    `json:"v"`
	SHA256    string `json:"sha256"`
	URL       string `json:"url"`
	Offset    int64  `json:"offset"`
	Total     int64  `json:"total"`
	ETag      string `json:"etag,omitempty"`
	LastMod   string `json:"last_modified,omitempty"`
	HashState []byte `json:"hash_state"`
}

const (
	checkpointVersion = 1
	maxCheckpoint     = 64 << 10
)

// checkpoint makes the data written so far durable (fdatasync), then
// records it: the checkpoint never claims more than is on disk.
func (j *job) checkpoint() error {
	if j.off == j.synced || j.req.Compression != "" {
		return nil
	}
	if err := fdatasync(j.part); err != nil {
		return permanent(fmt.Errorf("sync ingest file: %w", err))
	}
	state, err := j.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return permanent(fmt.Errorf("checkpoint: %w", err))
	}
	data, err := json.Marshal(checkpoint{
		Version: checkpointVersion, SHA256: hex.EncodeToString(j.req.SHA256[:]), URL: j.req.URL,
		Offset: j.off, Total: j.total, ETag: j.etag, LastMod: j.lastMod, HashState: state,
	})
	if err != nil {
		return permanent(fmt.Errorf("checkpoint: %w", err))
	}
	if err := atomicfile.WriteUnsynced(j.req.Checkpoint, data); err != nil {
		return permanent(fmt.Errorf("write checkpoint: %w", err))
	}
	j.synced = j.off
	return nil
}

// resume continues from a checkpoint: the data up to the offset it claims
// is copied into a new file and hashed again (it must give the
// checkpoint's hash state), and the pull goes on from there.
func (j *job) resume(ctx context.Context) error {
	data, err := readCheckpoint(j.req.Checkpoint)
	if err != nil {
		return err
	}
	ck, _, err := decodeCheckpoint(data, j.req.SHA256)
	if err != nil {
		return err
	}
	if ck.URL != j.req.URL {
		return errors.New("the url changed")
	}
	if j.req.Size > 0 && (ck.Offset > j.req.Size || ck.Total >= 0 && ck.Total != j.req.Size) {
		return fmt.Errorf("the checkpoint's offset %d or size %d is not the image's size %d", ck.Offset, ck.Total, j.req.Size)
	}
	j.req.Progress.Total.Store(ck.Total) // the cache counts this pull's space while it copies
	part, h, err := j.continuePart(ctx, ck.Offset, ck.HashState)
	if err != nil {
		return err
	}
	j.part = part
	j.h, j.off, j.synced, j.total = h, ck.Offset, ck.Offset, ck.Total
	j.etag, j.lastMod, j.resumed = ck.ETag, ck.LastMod, ck.Offset > 0
	j.req.Progress.Done.Store(j.off)
	j.req.Progress.Total.Store(j.total)
	return nil
}

// defaultResumeReserve is what a resume's copy leaves free when the
// request names no reserve.
const defaultResumeReserve = 64 << 20

// copyChunk is how much a resume copies between looks at ctx.
const copyChunk = 64 << 20

// continuePart is a new ingest file, created by the pull itself, holding
// the first off bytes of the one an earlier attempt left, positioned after
// them, and the SHA-256 state of those bytes. The old file is only read:
// writing on into it would write into whatever file someone linked at its
// path (createPart says why). The copy is made in the kernel
// (copy_file_range, which on XFS and btrfs clones the extents instead of
// writing them: a loop-mounted XFS showed no space used by a 300 MiB
// copy) and needs the bytes plus the request's reserve free either way
// (else the pull starts over, deleting the old data first). The bytes are
// then hashed as they are in the new file, the only one that counts, and
// must give state, the checkpoint's hash state: the final digest covers
// every byte of the blob, whatever happened to the old file (a crash that
// lost part of it, a file put in its place). Once per resume; ctx cancels
// it, and the old data and checkpoint stay for the next attempt.
func (j *job) continuePart(ctx context.Context, off int64, state []byte) (*os.File, hash.Hash, error) {
	old, size, err := openRegular(j.req.Part)
	if err != nil {
		return nil, nil, err
	}
	defer old.Close()
	if size < off {
		return nil, nil, fmt.Errorf("ingest file shorter than the checkpoint's %d bytes", off)
	}
	dir := filepath.Dir(j.req.Part)
	tmp := j.req.Part + ".resume" // the cache deletes it at Open if left behind
	f, err := createPart(tmp)
	if err != nil {
		return nil, nil, err
	}
	h := sha256.New()
	err = func() error {
		reserve := j.req.ResumeReserve
		if reserve <= 0 {
			reserve = defaultResumeReserve
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err == nil && fs.Bavail*uint64(fs.Bsize) < uint64(off)+uint64(reserve) {
			return fmt.Errorf("%d bytes free, too few to copy the %d bytes pulled before and keep %d free", fs.Bavail*uint64(fs.Bsize), off, reserve)
		}
		for done := int64(0); done < off; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := io.CopyN(f, old, min(copyChunk, off-done)) // copy_file_range
			done += n
			if err != nil {
				return err
			}
		}
		buf := make([]byte, 1<<20)
		for done := int64(0); done < off; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := f.ReadAt(buf[:min(int64(len(buf)), off-done)], done)
			if err != nil {
				return err
			}
			h.Write(buf[:n])
			done += int64(n)
		}
		if got, err := h.(encoding.BinaryMarshaler).MarshalBinary(); err != nil || !bytes.Equal(got, state) {
			return fmt.Errorf("the ingest file's first %d bytes are not those the checkpoint hashed", off)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		if err := f.Sync(); err != nil { // the checkpoint says these bytes are on disk
			return err
		}
		if err := os.Rename(tmp, j.req.Part); err != nil {
			return err
		}
		return atomicfile.SyncDir(dir) // later checkpoints describe this file
	}()
	if err != nil {
		f.Close()
		os.Remove(tmp)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("copy the ingest file to resume: %w", err)
	}
	return f, h, nil
}

// readCheckpoint reads the checkpoint at path: a regular file at the path
// itself, at most maxCheckpoint bytes. A FIFO there would make the read
// wait for a writer (and the worker with it, past cancellation), a link to
// /dev/zero or a sparse file would be read into memory without end.
func readCheckpoint(path string) ([]byte, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxCheckpoint {
		return nil, errors.New("checkpoint too large")
	}
	return io.ReadAll(io.LimitReader(f, maxCheckpoint+1))
}

// decodeCheckpoint parses and checks a checkpoint for digest want.
func decodeCheckpoint(data []byte, want [32]byte) (checkpoint, hash.Hash, error) {
	var ck checkpoint
	if len(data) > maxCheckpoint {
		return ck, nil, errors.New("checkpoint too large")
	}
	if err := json.Unmarshal(data, &ck); err != nil {
		return ck, nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	switch {
	case ck.Version != checkpointVersion:
		return ck, nil, fmt.Errorf("checkpoint version %d", ck.Version)
	case ck.SHA256 != hex.EncodeToString(want[:]):
		return ck, nil, errors.New("checkpoint of another image")
	case ck.Offset < 0 || ck.Total < -1 || ck.Total >= 0 && ck.Offset > ck.Total:
		return ck, nil, fmt.Errorf("checkpoint offset %d of %d", ck.Offset, ck.Total)
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(ck.HashState); err != nil {
		return ck, nil, fmt.Errorf("checkpoint hash state: %w", err)
	}
	// The state ends with the count of bytes hashed: it must be the offset.
	if n := len(ck.HashState); n < 8 || binary.BigEndian.Uint64(ck.HashState[n-8:]) != uint64(ck.Offset) {
		return ck, nil, errors.New("checkpoint hash state does not cover its offset")
	}
	return ck, h, nil
}

// fdatasync makes the data written to f durable, with the size that
// retrieving it needs, but not its other metadata.
func fdatasync(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}
