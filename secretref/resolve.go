package secretref

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
)

// maxSecret bounds what a file ref may hold.
const maxSecret = 64 << 10

// Resolver reads secret values. Its errors name the reference, never the
// value.
type Resolver struct {
	// LookupEnv reads the environment (os.LookupEnv in the appliance).
	LookupEnv func(string) (string, bool)
}

// Resolve returns the value a reference points to.
func (r Resolver) Resolve(_ context.Context, ref string) ([]byte, error) {
	p, err := Parse(ref)
	if err != nil {
		return nil, err
	}
	switch p.Scheme {
	case SchemeEnv:
		v, ok := r.LookupEnv(p.Name)
		if !ok {
			return nil, fmt.Errorf("secret %s: variable not set", p)
		}
		return []byte(v), nil
	default:
		return readFile(p)
	}
}

func readFile(p Ref) ([]byte, error) {
	f, err := os.Open(p.Name)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", p, err)
	}
	if len(b) > maxSecret {
		return nil, fmt.Errorf("secret %s: larger than %d bytes", p, maxSecret)
	}
	return bytes.TrimSuffix(b, []byte("\n")), nil
}
