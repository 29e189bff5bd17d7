package lease

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/site"
)

func openOnly(dir string) (*Node, error) {
	return Open(Config{Dir: dir, ID: "appliance-1", StateMachine: site.NewState(), Logger: quietLog()})
}

// TestOpenRefusesARaftDBThatLostItsState: a raft.db emptied or zeroed
// after entries were acknowledged is an error naming the file, never a
// fresh single voter that silently forgets every entry (and, in a
// cluster, a second leader).
func TestOpenRefusesARaftDBThatLostItsState(t *testing.T) {
	for name, damage := range map[string]func(path string) error{
		"emptied": func(p string) error { return os.Truncate(p, 0) },
		"zeroed": func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, make([]byte, fi.Size()), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			h := start(t, dir)
			h.put("n1", "52:54:00:00:00:01")
			h.close()
			db := filepath.Join(dir, "raft.db")
			if err := damage(db); err != nil {
				t.Fatal(err)
			}
			n, err := openOnly(dir)
			if err == nil {
				n.Close()
				t.Fatal("Open of a raft.db without its state succeeded (a fresh cluster that lost every entry)")
			}
			if !strings.Contains(err.Error(), db) {
				t.Errorf("Open = %v; want an error naming %s", err, db)
			}
		})
	}
}

// TestOpenReportsADamagedRaftDB: bolt panics on some damaged pages; Open
// turns that into an error naming the file.
func TestOpenReportsADamagedRaftDB(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	h.put("n1", "52:54:00:00:00:01")
	h.close()
	db := filepath.Join(dir, "raft.db")
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The two meta pages stay; every page they point to is garbage.
	garbage := []byte(strings.Repeat("\xa5\x5a\x17\x71", int(fi.Size()-2*4096)/4))
	if _, err := f.WriteAt(garbage, 2*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	n, err := openOnly(dir)
	if err == nil {
		n.Close()
		t.Fatal("Open of a damaged raft.db succeeded")
	}
	if !strings.Contains(err.Error(), db) {
		t.Errorf("Open = %v; want an error naming %s", err, db)
	}
}

// TestFirstStartCrashLeavesNoStatelessRaftDB: a first start killed before
// its bootstrap was durable leaves only a temporary file, which the next
// start replaces; raft.db appears only once it holds the bootstrap.
func TestFirstStartCrashLeavesNoStatelessRaftDB(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "raft.db.new"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := start(t, dir)
	h.put("n1", "52:54:00:00:00:01")
	h.close()
	if _, err := os.Stat(filepath.Join(dir, "raft.db.new")); !os.IsNotExist(err) {
		t.Errorf("raft.db.new left behind: %v", err)
	}
	h2 := start(t, dir)
	defer h2.close()
	if diff := cmp.Diff([]string{"n1/52:54:00:00:00:01"}, listed(h2.state)); diff != "" {
		t.Fatalf("entries after restart (-want +got):\n%s", diff)
	}
}
