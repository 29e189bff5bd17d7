package httpfile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestETagListMatch(t *testing.T) {
	const etag = `"abc"`
	tests := []struct {
		name, list string
		weak, want bool
	}{
		{"exact", `"abc"`, false, true},
		{"star", `*`, false, true},
		{"in a list", `"x", "abc"`, false, true},
		{"weak tag, weak compare", `W/"abc"`, true, true},
		{"weak tag, strong compare", `W/"abc"`, false, false},
		{"other", `"abd"`, true, false},
		{"unquoted", `abc`, true, false},
		{"comma inside a tag", `"x,"abc"`, true, false},
		{"unterminated", `"abc`, true, false},
		{"empty", ``, true, false},
		{"list with empties", ` , ,"abc"`, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := etagListMatch(tt.list, etag, tt.weak)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("etagListMatch(%q, weak=%v) (-want +got):\n%s", tt.list, tt.weak, diff)
			}
		})
	}
}

func FuzzETagList(f *testing.F) {
	for _, s := range []string{`"abc"`, `*`, `W/"abc", "x"`, `"`, `W/`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		strong := etagListMatch(list, `"abc"`, false)
		weak := etagListMatch(list, `"abc"`, true)
		if strong && !weak {
			t.Fatalf("%q matches strongly but not weakly", list)
		}
	})
}
