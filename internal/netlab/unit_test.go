package netlab

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStartTicks(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    uint64
		wantErr bool
	}{
		{
			name: "plain",
			stat: "42 (netlab.test) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 8 0 123456 0 0",
			want: 123456,
		},
		{
			name: "spaces and parens in comm",
			stat: "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 8 0 777 0 0",
			want: 777,
		},
		{name: "no comm", stat: "42 netlab S 1", wantErr: true},
		{name: "short", stat: "42 (x) S 1 2 3", wantErr: true},
		{name: "not a number", stat: "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 8 0 abc 0", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := startTicks(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("startTicks() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("startTicks() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProcessStartIsRecent(t *testing.T) {
	start, err := ProcessStart()
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(start); age < 0 || age > time.Hour {
		t.Errorf("ProcessStart() = %v, %v ago; want within the last hour", start, age)
	}
}

func TestLabName(t *testing.T) {
	tests := []struct {
		name string
		ns   string
		want string
	}{
		{name: "switch", ns: "sbt-0a1b2c-sw", want: "sbt-0a1b2c"},
		{name: "host", ns: "sbt-0a1b2c-dhcp", want: "sbt-0a1b2c"},
		{name: "bare id", ns: "sbt-0a1b2c", want: "sbt-0a1b2c"},
		{name: "other prefix", ns: "foo-0a1b2c-sw", want: ""},
		{name: "uppercase", ns: "sbt-0A1B2C-sw", want: ""},
		{name: "short id", ns: "sbt-0a1b-sw", want: ""},
		{name: "dot dot", ns: "sbt-0a1b2c-..", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if m := labName.FindStringSubmatch(tc.ns); m != nil {
				got = m[1]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lab id of %q mismatch (-want +got):\n%s", tc.ns, diff)
			}
		})
	}
}

func TestLineWithAll(t *testing.T) {
	log := "a 1 DHCPDISCOVER(eth0) 52:54:00:00:00:01\na 1 user class: iPXE\nb 2 DHCPDISCOVER(eth0) 52:54:00:00:00:02\n"
	tests := []struct {
		name    string
		substrs []string
		want    string
		wantOK  bool
	}{
		{name: "one line holds both", substrs: []string{"DHCPDISCOVER", "00:02"}, want: "b 2 DHCPDISCOVER(eth0) 52:54:00:00:00:02", wantOK: true},
		{name: "split over lines", substrs: []string{"DHCPDISCOVER", "iPXE"}},
		{name: "absent", substrs: []string{"DHCPREQUEST"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := lineWithAll(log, tc.substrs)
			if diff := cmp.Diff([]any{tc.want, tc.wantOK}, []any{got, ok}); diff != "" {
				t.Errorf("lineWithAll mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBootOrder(t *testing.T) {
	for _, tc := range []struct {
		boot  string
		retry time.Duration
		want  string
	}{
		{"", 0, "n"},
		{"", -time.Second, "n"},
		{"", 3 * time.Second, "n,reboot-timeout=3000"},
		{"c", 0, "c"},
		{"c", 2 * time.Second, "c,reboot-timeout=2000"},
	} {
		if got := bootOrder(&VMConfig{Boot: tc.boot, RetryBoot: tc.retry}); got != tc.want {
			t.Errorf("bootOrder(Boot %q, RetryBoot %v) = %q, want %q", tc.boot, tc.retry, got, tc.want)
		}
	}
}
