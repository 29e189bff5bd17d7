package bmc

import (
	"context"

	"github.com/siteboot/siteboot/internal/redact"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// credentials reads ref: a JSON object {"username": …, "password": …},
// both non-empty strings, no other key. Every failure names the ref (once
// it is a valid reference) and never the value.
func (r *Relay) credentials(ctx context.Context, ref string) (credentials, error) {
	var c credentials
	if ref == "" {
		return c, relayerr.New(relayerr.CredentialsUnavailable, "credentials_ref is empty")
	}
	name := redact.Ref(ref) // a value pasted as the ref is not repeated
	if err := r.cfg.Secrets.Check(ref); err != nil {
		return c, relayerr.New(relayerr.CredentialsUnavailable, "credentials_ref %q is not a valid secret reference", name)
	}
	raw, err := r.cfg.Secrets.Resolve(ctx, ref)
	if err != nil {
		return c, relayerr.New(relayerr.CredentialsUnavailable, "credentials_ref %q cannot be read", name)
	}
	err = decodeStrict("credentials", string(raw), map[string]fieldFunc{
		"username": stringField(&c.Username),
		"password": stringField(&c.Password),
	})
	if err != nil || len(raw) == 0 {
		return credentials{}, relayerr.New(relayerr.CredentialsUnavailable,
			`credentials_ref %q is not a JSON object {"username": …, "password": …}`, name)
	}
	if c.Username == "" || c.Password == "" {
		return credentials{}, relayerr.New(relayerr.CredentialsUnavailable,
			"credentials_ref %q: username and password must both be non-empty", name)
	}
	return c, nil
}
