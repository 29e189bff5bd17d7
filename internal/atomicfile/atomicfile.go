// Package atomicfile replaces small state files so that a crash leaves
// either the old content or the new one, never a torn file: the data goes
// to a new temporary file in the target's directory, is fsynced and renamed
// over the target, and the directory is fsynced so that the rename itself
// survives. The image cache's index and checkpoints and the discovery
// ledger and node key are written this way. Every file it writes has mode
// 0600: these files may hold pre-signed URLs and keys.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write replaces path with data and makes the change durable: once it
// returns, a crash brings back the new content.
func Write(path string, data []byte) error { return replace(path, data, true) }

// WriteUnsynced is Write without the directory's fsync: after a crash path
// holds the old content or the new one, whichever the file system kept. It
// is for a file rewritten often whose older content is still correct, such
// as a pull's checkpoint.
func WriteUnsynced(path string, data []byte) error { return replace(path, data, false) }

func replace(path string, data []byte, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := Temp(dir, tempPattern(path), data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if durable {
		return SyncDir(dir)
	}
	return nil
}

// tempPattern names Write's temporary files: hidden, and ending in .tmp.
func tempPattern(path string) string { return "." + filepath.Base(path) + "-*.tmp" }

// Temp writes data to a new mode-0600 file in dir, named by pattern as
// os.CreateTemp names it, fsynced and closed, and returns the file's path.
// On error nothing is left behind.
func Temp(dir, pattern string, data []byte) (name string, err error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// SyncDir makes the entries of dir (creations, renames, removals) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// RemoveLeftovers deletes the temporary files that a crash in the middle of
// a Write of path left next to it.
func RemoveLeftovers(path string) error {
	dir, prefix := filepath.Split(path)
	des, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return err
	}
	prefix = "." + prefix + "-"
	var errs []error
	for _, de := range des {
		n := de.Name()
		if !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ".tmp") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
