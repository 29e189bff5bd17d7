package bmc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// fieldFunc decodes one JSON value of a known key.
type fieldFunc func(raw json.RawMessage) error

// decodeStrict decodes a JSON object whose keys must each be in fields,
// at most once, with nothing after it. "" is the empty object. Errors name
// the key (quoted, cut to 64 bytes) and never hold a value.
func decodeStrict(what, data string, fields map[string]fieldFunc) error {
	if data == "" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("%s: not a JSON object", what)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s: malformed JSON", what)
		}
		key, _ := tok.(string)
		name := quoteKey(key)
		if seen[key] {
			return fmt.Errorf("%s: duplicate key %s", what, name)
		}
		seen[key] = true
		f, ok := fields[key]
		if !ok {
			return fmt.Errorf("%s: unknown key %s", what, name)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%s: malformed value of %s", what, name)
		}
		if err := f(raw); err != nil {
			return fmt.Errorf("%s: %s %w", what, name, err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return fmt.Errorf("%s: malformed JSON", what)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: trailing data after the object", what)
	}
	return nil
}

func quoteKey(k string) string {
	if len(k) > 64 {
		k = k[:64] + "…"
	}
	return strconv.Quote(k)
}

func stringField(dst *string) fieldFunc {
	return func(raw json.RawMessage) error {
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
			return errors.New("must be a string")
		}
		return nil
	}
}

func boolField(dst *bool) fieldFunc {
	return func(raw json.RawMessage) error {
		switch string(raw) {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			return errors.New("must be true or false")
		}
		return nil
	}
}

// intField accepts a JSON integer in [lo, hi].
func intField(dst *int, lo, hi int) fieldFunc {
	return func(raw json.RawMessage) error {
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer from %d to %d", lo, hi)
		}
		*dst = n
		return nil
	}
}
