package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runRoot(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out, &out, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// `siteboot man DIR` writes a page per command from the command tree, dated
// by SOURCE_DATE_EPOCH, without cobra's dated trailer, and none for itself.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if out, err := runRoot(t, map[string]string{"SOURCE_DATE_EPOCH": "1764633600"}, "man", dir); err != nil {
		t.Fatalf("siteboot man: %v: %s", err, out)
	}
	serve, err := os.ReadFile(filepath.Join(dir, "siteboot-serve.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.TH "SITEBOOT" "1" "Dec 2025" "siteboot dev" "siteboot manual"`, `\fB--data-dir\fP=""`, "SITEBOOT_SITE_ID"} {
		if !bytes.Contains(serve, []byte(want)) {
			t.Errorf("siteboot-serve.1 lacks %q", want)
		}
	}
	if bytes.Contains(serve, []byte("Auto generated")) {
		t.Error("siteboot-serve.1 has cobra's dated trailer")
	}
	for _, page := range []string{"siteboot.1", "siteboot-entry-add.1", "siteboot-version.1"} {
		if _, err := os.Stat(filepath.Join(dir, page)); err != nil {
			t.Errorf("no %s: %v", page, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "siteboot-man.1")); err == nil {
		t.Error("the hidden man command has a page")
	}
	if _, err := runRoot(t, map[string]string{"SOURCE_DATE_EPOCH": "yesterday"}, "man", t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("man with SOURCE_DATE_EPOCH=yesterday: %v; want a refusal naming it", err)
	}
}

func TestVersionPrintsCommit(t *testing.T) {
	out, err := runRoot(t, nil, "version")
	if err != nil || out != "siteboot dev (commit unknown)\n" {
		t.Errorf("version = %q, %v", out, err)
	}
	out, err = runRoot(t, nil, "version", "-o", "json")
	if err != nil || out != "{\n  \"version\": \"dev\",\n  \"commit\": \"unknown\"\n}\n" {
		t.Errorf("version -o json = %q, %v", out, err)
	}
}
