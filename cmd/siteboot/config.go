package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/siteboot/siteboot/appliance"
	"go.yaml.in/yaml/v3"
)

// Config is the appliance configuration (appliance.Config): a YAML file,
// then SITEBOOT_* environment variables, then flags, each overriding the
// one before. The yaml key path names the environment variable:
// admin.socket is SITEBOOT_ADMIN_SOCKET.
type Config = appliance.Config

// loadConfig reads file (if any) over the defaults, then the environment.
// Unknown keys in the file are errors, naming the key.
func loadConfig(file string, env func(string) (string, bool)) (Config, error) {
	c := appliance.DefaultConfig()
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("config %s: %w", file, err)
		}
	}
	var errs []error
	walkConfig(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value, _ reflect.StructField) {
		name := envName(key)
		v, ok := env(name)
		if !ok {
			return
		}
		if err := setField(f, v); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", name, err))
		}
	})
	return c, errors.Join(errs...)
}

func envName(key string) string {
	return "SITEBOOT_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// walkConfig calls fn for every leaf field of a config struct with its
// dotted key.
func walkConfig(v reflect.Value, prefix string, fn func(key string, f reflect.Value, sf reflect.StructField)) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		key := strings.Split(sf.Tag.Get("yaml"), ",")[0]
		if prefix != "" {
			key = prefix + "." + key
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(appliance.Duration(0)) {
			walkConfig(f, key, fn)
			continue
		}
		fn(key, f, sf)
	}
}

func setField(f reflect.Value, s string) error {
	switch p := f.Addr().Interface().(type) {
	case *string:
		*p = s
	case *appliance.Duration:
		return p.Set(s)
	case *bool:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*p = v
	case *[]string:
		*p = nil
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				*p = append(*p, part)
			}
		}
	default:
		return fmt.Errorf("unsupported config type %s", f.Type())
	}
	return nil
}

// configReference is the key list --help prints.
func configReference() string {
	var b strings.Builder
	c := appliance.DefaultConfig()
	walkConfig(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value, sf reflect.StructField) {
		def := fmt.Sprint(f.Interface())
		if d, ok := f.Interface().(appliance.Duration); ok {
			def = time.Duration(d).String()
		}
		if def == "" || def == "[]" {
			def = "-"
		}
		fmt.Fprintf(&b, "  %-22s %-30s default %s\n      %s\n", key, envName(key), def, sf.Tag.Get("doc"))
	})
	return b.String()
}
