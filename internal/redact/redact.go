// Package redact makes text fit for logs, errors and status views: URL
// drops what in a URL can be a credential (user info, the query of a
// pre-signed URL, the fragment), URLError takes the whole URL out of an
// HTTP client's error, Clip bounds the length of text a client or an
// origin chose, and Ref names a secret ref without ever repeating a value
// pasted in its place. Every URL the appliance logs goes through URL.
package redact

import (
	"net/url"

	"github.com/siteboot/siteboot/secretref"
)

// maxClip is how much of an untrusted string Clip keeps.
const maxClip = 80

// URL is raw as scheme://host/path, clipped: without user info, query and
// fragment. A URL that had a query ends in "?…", so a reader knows that
// something was left out. An unparsable URL is "<unparsable url>": its text
// may be anything, secrets included.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable url>"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.RawQuery != "" || u.ForceQuery {
		return Clip(r.String()) + "?…"
	}
	return Clip(r.String())
}

// Clip shortens s to its first 80 bytes and an ellipsis before it goes into
// an error or a log line.
func Clip(s string) string {
	if len(s) <= maxClip {
		return s
	}
	return s[:maxClip] + "…"
}

// URLError is err without the *url.Error that net/http's client and
// url.Parse return: its text is the whole URL, query included. The caller
// names the URL with URL.
func URLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// NotARef is what Ref says of a string that is not a secret ref.
const NotARef = "<not shown: not of the form env://NAME or file:///PATH>"

// Ref is ref clipped when it is a well-formed secret ref (a name, fit for
// errors and logs), else NotARef: a caller who pasted the
// secret itself, or a header value, where the ref belongs must not see it
// repeated in an error, a log line or a response.
func Ref(ref string) string {
	if _, err := secretref.Parse(ref); err != nil {
		return NotARef
	}
	return Clip(ref)
}
