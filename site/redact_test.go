package site

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
)

// The "image added" line names the image's origin without the query of a
// pre-signed URL, which is a credential.
func TestImageAddedLogRedactsTheURL(t *testing.T) {
	var logs bytes.Buffer
	s, _, _ := newTestStore()
	s.log = slog.New(slog.NewTextHandler(&logs, nil))
	const secret = "X-Amz-Signature=0123456789abcdef"
	u := "https://bucket.example/images/a.iso?X-Amz-Credential=AKIAEXAMPLE&" + secret
	img := &sitev1.CacheImage{Url: u, Sha256: digest(7), Format: "iso"}
	if _, err := s.AddImage(context.Background(), &statev1.ImageWant{Image: img}); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "image added") || !strings.Contains(out, "https://bucket.example/images/a.iso") {
		t.Fatalf("no image added line naming the origin in:\n%s", out)
	}
	for _, leak := range []string{secret, "AKIAEXAMPLE"} {
		if strings.Contains(out, leak) {
			t.Errorf("log carries %q:\n%s", leak, out)
		}
	}
}

// A refused image URL is named in the error without its query: the error
// goes into the API's "admin call refused" log line.
func TestRefusedURLErrorRedactsTheQuery(t *testing.T) {
	const secret = "X-Amz-Signature=0123456789abcdef"
	for _, u := range []string{"ftp://bucket.example/a.iso?" + secret, "https:///a.iso?" + secret, "https://bucket.example/%zz.iso?" + secret} {
		err := validateHTTPURL("image.url", u)
		if err == nil {
			t.Fatalf("%q accepted", u)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error carries the query: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "image.url: ") {
			t.Errorf("error does not name the field first: %v", err)
		}
	}
}
