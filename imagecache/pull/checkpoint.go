package pull

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"

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

// resume continues from a checkpoint: the data is cut back to the offset it
// claims and the hash state restored.
func (j *job) resume() error {
	data, err := os.ReadFile(j.req.Checkpoint)
	if err != nil {
		return err
	}
	ck, h, err := decodeCheckpoint(data, j.req.SHA256)
	if err != nil {
		return err
	}
	if ck.URL != j.req.URL {
		return errors.New("the url changed")
	}
	fi, err := j.part.Stat()
	if err != nil || fi.Size() < ck.Offset {
		return fmt.Errorf("ingest file shorter than the checkpoint's %d bytes", ck.Offset)
	}
	if err := j.part.Truncate(ck.Offset); err != nil {
		return err
	}
	if _, err := j.part.Seek(ck.Offset, 0); err != nil {
		return err
	}
	j.h, j.off, j.synced, j.total = h, ck.Offset, ck.Offset, ck.Total
	j.etag, j.lastMod, j.resumed = ck.ETag, ck.LastMod, ck.Offset > 0
	j.req.Progress.Done.Store(j.off)
	j.req.Progress.Total.Store(j.total)
	return nil
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
