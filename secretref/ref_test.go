package secretref

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     Ref
		wantErr  bool
	}{
		{"env", "env://BC_TOKEN", Ref{SchemeEnv, "BC_TOKEN"}, false},
		{"file", "file:///etc/siteboot/token", Ref{SchemeFile, "/etc/siteboot/token"}, false},
		{"no scheme", "BC_TOKEN", Ref{}, true},
		{"unknown scheme", "vault://x", Ref{}, true},
		{"env empty", "env://", Ref{}, true},
		{"env digit first", "env://1X", Ref{}, true},
		{"env dash", "env://A-B", Ref{}, true},
		{"file relative", "file://etc/x", Ref{}, true},
		{"file dotdot", "file:///etc/../x", Ref{}, true},
		{"file nul", "file:///etc/x\x00", Ref{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if err == nil && got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}
