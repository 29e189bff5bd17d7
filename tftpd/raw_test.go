package tftpd

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNegotiation drives transfers with hand-built RRQ packets and checks
// the OACK, the block size used and the bytes received.
func TestNegotiation(t *testing.T) {
	file := testFiles["ipxe.efi"]
	size := strconv.Itoa(len(file))
	tests := []struct {
		name     string
		maxBlock int
		opts     []string
		want     rawResult // Size and SHA256 filled in below
	}{
		{"no options: plain RFC 1350", 0, nil, rawResult{FirstLen: 512, Blocks: len(file)/512 + 1}},
		{"blksize 1468", 0, []string{"blksize", "1468"},
			rawResult{OACK: map[string]string{"blksize": "1468"}, FirstLen: 1468, Blocks: len(file)/1468 + 1}},
		{"blksize 65464 clamped", 0, []string{"blksize", "65464"},
			rawResult{OACK: map[string]string{"blksize": "1468"}, FirstLen: 1468, Blocks: len(file)/1468 + 1}},
		{"blksize clamped to MaxBlockSize", 1024, []string{"blksize", "1468"},
			rawResult{OACK: map[string]string{"blksize": "1024"}, FirstLen: 1024, Blocks: len(file)/1024 + 1}},
		{"blksize below 512 ignored", 0, []string{"blksize", "8"}, rawResult{FirstLen: 512, Blocks: len(file)/512 + 1}},
		{"tsize answered", 0, []string{"tsize", "0"},
			rawResult{OACK: map[string]string{"tsize": size}, FirstLen: 512, Blocks: len(file)/512 + 1}},
		{"windowsize alone", 0, []string{"windowsize", "4"},
			rawResult{OACK: map[string]string{"windowsize": "4"}, FirstLen: 512, Blocks: len(file)/512 + 1}},
		{"edk2 style: blksize tsize windowsize", 0, []string{"blksize", "1468", "tsize", "0", "windowsize", "4"},
			rawResult{OACK: map[string]string{"blksize": "1468", "tsize": size, "windowsize": "4"}, FirstLen: 1468, Blocks: len(file)/1468 + 1}},
		{"option names are matched as sent", 0, []string{"BLKSIZE", "1468", "timeout", "1"},
			rawResult{FirstLen: 512, Blocks: len(file)/512 + 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := start(t, Config{MaxBlockSize: tc.maxBlock})
			got := rawGet(t, fx.addr, request(1, "ipxe.efi", "octet", tc.opts...))
			tc.want.Size, tc.want.SHA256 = len(file), sha256.Sum256(file)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("transfer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExactMultipleEndsWithEmptyBlock checks RFC 1350's end of transfer
// when the size is a multiple of the block size.
func TestExactMultipleEndsWithEmptyBlock(t *testing.T) {
	fx := start(t, Config{})
	file := testFiles["exact.bin"]
	got := rawGet(t, fx.addr, request(1, "exact.bin", "octet", "blksize", "1468"))
	want := rawResult{OACK: map[string]string{"blksize": "1468"}, FirstLen: 1468, Blocks: len(file)/1468 + 1,
		Size: len(file), SHA256: sha256.Sum256(file)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transfer (-want +got):\n%s", diff)
	}
}

// TestRefusals checks that every request outside the set gets an ERROR
// packet and a log line. pin/tftp sends every ERROR with code 1.
func TestRefusals(t *testing.T) {
	fx := start(t, Config{})
	if err := os.WriteFile(filepath.Join(fx.dir, "undionly.kpxe"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	type refusal struct {
		ErrCode int
		ErrMsg  string
	}
	tests := []struct {
		name   string
		packet []byte
		want   refusal
	}{
		{"unknown file", request(1, "nope.efi", "octet"), refusal{1, "file not found"}},
		{"dotdot", request(1, "../etc/passwd", "octet"), refusal{1, "access violation"}},
		{"dotdot inside", request(1, "arm64-efi/../ipxe.efi", "octet"), refusal{1, "access violation"}},
		{"absolute path outside the set", request(1, "/etc/passwd", "octet"), refusal{1, "file not found"}},
		{"two leading slashes", request(1, "//ipxe.efi", "octet"), refusal{1, "access violation"}},
		{"backslash", request(1, `arm64-efi\snponly.efi`, "octet"), refusal{1, "access violation"}},
		{"empty name", request(1, "", "octet"), refusal{1, "access violation"}},
		{"control character", request(1, "ipxe\n.efi", "octet"), refusal{1, "access violation"}},
		{"nul ends the name early", request(1, "nope\x00ipxe.efi", "octet"), refusal{1, "file not found"}},
		{"file changed since load", request(1, "undionly.kpxe", "octet"), refusal{1, "access violation"}},
		{"write request", request(2, "ipxe.efi", "octet"), refusal{1, "access violation: this server is read-only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := rawGet(t, fx.addr, tc.packet)
			if diff := cmp.Diff(tc.want, refusal{res.ErrCode, res.ErrMsg}); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if res.Size != 0 || res.Blocks != 0 {
				t.Errorf("got %d bytes in %d blocks of a refused file", res.Size, res.Blocks)
			}
		})
	}
	if n := len(fx.logs.lines("tftp transfer", "result=refused")); n != 8 {
		t.Errorf("refused log lines = %d, want 8", n)
	}
	// The warm-up transfer of "tiny" is the one ok. Nothing was dropped.
	want := map[string]float64{
		`siteboot_tftp_transfers_total{result="aborted"}`:                      0,
		`siteboot_tftp_transfers_total{result="error"}`:                        0,
		`siteboot_tftp_transfers_total{result="not_found"}`:                    3,
		`siteboot_tftp_transfers_total{result="ok"}`:                           1,
		`siteboot_tftp_transfers_total{result="refused"}`:                      8,
		`siteboot_tftp_transfers_total{result="timeout"}`:                      0,
		`siteboot_tftp_bytes_total`:                                            100,
		`siteboot_tftp_transfer_seconds_count`:                                 1,
		`siteboot_tftp_log_lines_suppressed_total`:                             0,
		`siteboot_tftp_active_transfers`:                                       0,
		`siteboot_tftp_requests_dropped_total{reason="duplicate"}`:             0,
		`siteboot_tftp_requests_dropped_total{reason="malformed"}`:             0,
		`siteboot_tftp_requests_dropped_total{reason="max_per_source"}`:        0,
		`siteboot_tftp_requests_dropped_total{reason="max_transfers"}`:         0,
		`siteboot_tftp_requests_dropped_total{reason="no_resources"}`:          0,
		`siteboot_tftp_requests_dropped_total{reason="not_host"}`:              0,
		`siteboot_tftp_requests_dropped_total{reason="error_limit"}`:           0,
		`siteboot_tftp_requests_dropped_total{reason="preempted_unconfirmed"}`: 0,
	}
	if diff := cmp.Diff(want, waitGather(t, fx.reg, want)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
