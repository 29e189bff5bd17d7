package discovery

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"github.com/siteboot/siteboot/internal/atomicfile"
	"google.golang.org/protobuf/proto"
)

// The ledger file (all integers big-endian):
//
//	"SBLEDGER" ‖ uint32 version (1) ‖ uint32 n ‖ n × lp(DiscoveredMachine) ‖ uint32 crc
//
// lp(x) = uint32(len(x)) ‖ x, each x a serialized
// bettercompute.agent.v1.DiscoveredMachine; crc is CRC-32C (Castagnoli) of
// every byte before it. Any deviation (bad magic, version, checksum, length,
// message or field, trailing bytes) makes the whole file corrupt.
const (
	ledgerMagic   = "SBLEDGER"
	ledgerVersion = 1
	// maxLedgerRecords and maxLedgerRecord bound what decodeLedger accepts.
	maxLedgerRecords = 1 << 16
	maxLedgerRecord  = 1 << 10
	maxLedgerFile    = 16 + maxLedgerRecords*(4+maxLedgerRecord) + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeLedger(ms []machine) ([]byte, error) {
	buf := make([]byte, 0, 16+len(ms)*96)
	buf = append(buf, ledgerMagic...)
	buf = binary.BigEndian.AppendUint32(buf, ledgerVersion)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(ms)))
	opts := proto.MarshalOptions{Deterministic: true}
	for i := range ms {
		rec, err := opts.Marshal(ms[i].proto())
		if err != nil {
			return nil, err
		}
		buf = appendLP(buf, rec)
	}
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli)), nil
}

func decodeLedger(data []byte) ([]machine, error) {
	if len(data) < len(ledgerMagic)+12 {
		return nil, errors.New("file too short")
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch (truncated or damaged)")
	}
	if !bytes.HasPrefix(body, []byte(ledgerMagic)) {
		return nil, errors.New("not a ledger file (bad magic)")
	}
	body = body[len(ledgerMagic):]
	if v := binary.BigEndian.Uint32(body); v != ledgerVersion {
		return nil, fmt.Errorf("version %d unknown", v)
	}
	n := binary.BigEndian.Uint32(body[4:])
	if n > maxLedgerRecords {
		return nil, fmt.Errorf("%d records, more than %d", n, maxLedgerRecords)
	}
	body = body[8:]
	ms := make([]machine, 0, min(n, 1024))
	for i := range n {
		m, rest, err := decodeRecord(body)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		ms = append(ms, m)
		body = rest
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%d bytes after the last record", len(body))
	}
	return ms, nil
}

func decodeRecord(b []byte) (machine, []byte, error) {
	if len(b) < 4 {
		return machine{}, nil, errors.New("truncated length")
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxLedgerRecord || int(n) > len(b)-4 {
		return machine{}, nil, fmt.Errorf("length %d out of bounds", n)
	}
	dm := &agentv1.DiscoveredMachine{}
	if err := proto.Unmarshal(b[4:4+n], dm); err != nil {
		return machine{}, nil, err
	}
	m, err := machineFromProto(dm)
	return m, b[4+n:], err
}

func machineFromProto(dm *agentv1.DiscoveredMachine) (machine, error) {
	if !isMAC(dm.GetMac()) {
		return machine{}, fmt.Errorf("mac %q is not in lowercase colon form", dm.GetMac())
	}
	if len(dm.GetProductUuid()) > uuidLen || len(dm.GetArch()) > maxArchLen || len(dm.GetRelay()) > len("255.255.255.255") {
		return machine{}, errors.New("field longer than its kind allows")
	}
	if err := dm.GetFirstSeen().CheckValid(); err != nil {
		return machine{}, fmt.Errorf("first_seen: %w", err)
	}
	if err := dm.GetLastSeen().CheckValid(); err != nil {
		return machine{}, fmt.Errorf("last_seen: %w", err)
	}
	m := machine{
		mac: dm.GetMac(), uuid: dm.GetProductUuid(), arch: dm.GetArch(), relay: dm.GetRelay(),
		first: dm.GetFirstSeen().AsTime(), last: dm.GetLastSeen().AsTime(), count: dm.GetCount(),
	}
	// The file keeps no flag for it (its format predates the flag): a
	// machine counted more than once over RepeatGap or longer was seen
	// repeatedly.
	m.repeat = m.count > 1 && m.last.Sub(m.first) >= RepeatGap
	return m, nil
}

// load reads cfg.Path into the (empty) ledger. A missing file is an empty
// ledger; a corrupt one is moved aside; temporary files of a save that did
// not finish are removed.
func (l *Ledger) load() error {
	if l.cfg.Path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(l.cfg.Path), 0o700); err != nil {
		return fmt.Errorf("discovery: ledger dir: %w", err)
	}
	// A crash in the middle of a save leaves its temporary file; the
	// renamed file before it is intact.
	if err := atomicfile.RemoveLeftovers(l.cfg.Path); err != nil {
		l.log.Warn("discovery: cannot remove what an interrupted save left", "path", l.cfg.Path, "err", err)
	}
	data, err := readBounded(l.cfg.Path, maxLedgerFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		return fmt.Errorf("discovery: ledger: %w", err)
	}
	var ms []machine
	if err == nil {
		ms, err = decodeLedger(data)
	}
	if err != nil {
		l.setAside(err)
		return nil
	}
	l.adopt(ms)
	return nil
}

func (l *Ledger) setAside(cause error) {
	bad := l.cfg.Path + ".corrupt"
	if err := os.Rename(l.cfg.Path, bad); err != nil {
		l.log.Error("discovery: ledger file is corrupt and cannot be set aside; starting empty",
			"path", l.cfg.Path, "err", cause, "rename_err", err)
		return
	}
	l.log.Warn("discovery: ledger file is corrupt; set aside, starting empty",
		"path", l.cfg.Path, "moved_to", bad, "err", cause)
}

// adopt takes loaded machines: those past Forget are dropped, and at most
// Max of the most recently seen are kept.
func (l *Ledger) adopt(ms []machine) {
	sortMachines(ms)
	cutoff := l.cfg.Now().Add(-l.cfg.Forget)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range ms {
		m := ms[i]
		if _, dup := l.machines[m.mac]; dup || !m.last.After(cutoff) || len(l.machines) >= l.cfg.Max {
			l.gen++ // the file holds more than the ledger: rewrite it
			continue
		}
		l.machines[m.mac] = &m
	}
	l.log.Info("discovery: ledger loaded", "path", l.cfg.Path, "machines", len(l.machines))
}

var errTooLarge = errors.New("file too large")

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errTooLarge
	}
	return data, nil
}
