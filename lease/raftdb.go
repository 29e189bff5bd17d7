package lease

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/siteboot/siteboot/internal/atomicfile"
	"go.etcd.io/bbolt"
)

// raftDB is where a node keeps its log and stable store. A bootstrapped
// raft.db is built under a temporary name and renamed into place, so
// raft.db exists only once it holds raft state: one that holds none was
// emptied or damaged, and is refused rather than bootstrapped again, which
// would forget every acknowledged entry.
type raftDB struct {
	path string // raft.db
	open string // the file open now: path, or path's temporary name while bootstrapping
}

// openRaftDB opens raft.db in dir, or, when it does not exist and the node
// is to bootstrap, its temporary file for the bootstrap (a torn one left by
// a killed first start is replaced).
func openRaftDB(dir string, bootstrap bool) (*raftDB, *raftboltdb.BoltStore, error) {
	db := &raftDB{path: filepath.Join(dir, "raft.db")}
	db.open = db.path
	if _, err := os.Lstat(db.path); errors.Is(err, fs.ErrNotExist) && bootstrap {
		db.open = db.path + ".new"
		store, err := openBolt(db.open)
		if err != nil && !errors.Is(err, bbolt.ErrTimeout) {
			// Torn by a first start that was killed; while another start
			// bootstraps it, its lock says so instead.
			if rerr := os.Remove(db.open); rerr != nil {
				return nil, nil, fmt.Errorf("lease: remove %s: %w", db.open, rerr)
			}
			store, err = openBolt(db.open)
		}
		return db, store, err
	}
	store, err := openBolt(db.open)
	return db, store, err
}

// openBolt opens a bolt store, turning bolt's panics on damaged pages into
// an error naming the file.
func openBolt(path string) (store *raftboltdb.BoltStore, err error) {
	defer func() {
		if r := recover(); r != nil {
			store, err = nil, fmt.Errorf("lease: %s is damaged (%v); restore it from a backup or move it away to start an empty cluster", path, r)
		}
	}()
	store, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: 2 * time.Second}})
	switch {
	case errors.Is(err, bbolt.ErrTimeout):
		return nil, fmt.Errorf("lease: %s is locked: another siteboot uses this data dir (%w)", path, err)
	case err != nil:
		return nil, fmt.Errorf("lease: open %s: %w", path, err)
	}
	return store, nil
}

// noState is the error for a raft.db without raft state.
func (db *raftDB) noState() error {
	return fmt.Errorf("lease: %s holds no raft state (emptied or damaged): restore it from a backup, "+
		"or move it away to start an empty cluster, which forgets every entry", db.path)
}

// bootstrapping reports whether the open file is the temporary one.
func (db *raftDB) bootstrapping() bool { return db.open != db.path }

// install moves a bootstrapped temporary file into place: store is closed,
// renamed to raft.db, and raft.db opened again.
func (db *raftDB) install(store *raftboltdb.BoltStore) (*raftboltdb.BoltStore, error) {
	if err := store.Close(); err != nil {
		return nil, fmt.Errorf("lease: close %s: %w", db.open, err)
	}
	if err := os.Rename(db.open, db.path); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(db.path)); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	db.open = db.path
	return openBolt(db.path)
}

// hasState is raft.HasExistingState, bolt's panics turned into an error.
func (db *raftDB) hasState(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (has bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease: %s is damaged (%v)", db.open, r)
		}
	}()
	return raft.HasExistingState(logs, stable, snaps)
}
