package pxe

import (
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func macStrings(m []net.HardwareAddr) []string {
	out := make([]string, len(m))
	for i, a := range m {
		out[i] = a.String()
	}
	return out
}

func TestGenerateMACs(t *testing.T) {
	tests := []struct {
		name    string
		prefix  string
		count   int
		want    []string // first and last
		wantErr bool
	}{
		{name: "two-byte prefix", prefix: "02:5b", count: 10000, want: []string{"02:5b:00:00:00:00", "02:5b:00:00:27:0f"}},
		{name: "five-byte prefix", prefix: "02:5b:00:00:01", count: 256, want: []string{"02:5b:00:00:01:00", "02:5b:00:00:01:ff"}},
		{name: "five-byte prefix overflows", prefix: "02:5b:00:00:01", count: 257, wantErr: true},
		{name: "zero count", prefix: "02", count: 0, wantErr: true},
		{name: "bad hex", prefix: "0g:5b", count: 1, wantErr: true},
		{name: "six bytes", prefix: "02:00:00:00:00:00", count: 1, wantErr: true},
		{name: "one digit", prefix: "2:5b", count: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GenerateMACs(tc.prefix, tc.count)
			if (err != nil) != tc.wantErr {
				t.Fatalf("GenerateMACs() error = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			s := macStrings(got)
			if diff := cmp.Diff(tc.want, []string{s[0], s[len(s)-1]}); diff != "" {
				t.Errorf("first/last mismatch (-want +got):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, m := range s {
				seen[m] = true
			}
			if len(seen) != tc.count {
				t.Errorf("%d distinct MACs, want %d", len(seen), tc.count)
			}
		})
	}
}

func TestParseMACs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "with comments", in: "# known\n02:5b:00:00:00:01\n\n  02-5B-00-00-00-02  \n", want: []string{"02:5b:00:00:00:01", "02:5b:00:00:00:02"}},
		{name: "eui64 refused", in: "02:5b:00:00:00:00:00:01\n", wantErr: true},
		{name: "garbage", in: "02:5b:00:00:00:01\nnot-a-mac\n", wantErr: true},
		{name: "empty", in: "# nothing\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMACs(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseMACs() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, macStrings(got), cmp.Comparer(func(a, b []string) bool { return len(a)+len(b) == 0 || cmp.Equal(a, b) })); diff != "" {
				t.Errorf("ParseMACs() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseMACs: any file content gives an error or only 6-byte MACs.
func FuzzParseMACs(f *testing.F) {
	f.Add("02:5b:00:00:00:01\n# c\n02-5b-00-00-00-02\n")
	f.Add("\x00\xff\n::::\n")
	f.Fuzz(func(t *testing.T, in string) {
		macs, err := ParseMACs(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, m := range macs {
			if len(m) != 6 {
				t.Fatalf("accepted %d-byte MAC %s", len(m), m)
			}
		}
	})
}
