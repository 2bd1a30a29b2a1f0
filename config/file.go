package config

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// readFile parses the config file at path: "flag value" lines, as ff's
// PlainParser reads them (a flag alone is "flag true"; blank lines, lines
// starting with # and the rest of a line after " #" are ignored), except
// that a tab also separates the flag from its value. A key the file
// repeats keeps every value (a repeatable flag), the last being the value.
// A file that does not exist holds nothing.
func readFile(path string, known map[string]bool) (map[string]Value, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	out := map[string]Value{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		key, value, found := strings.Cut(line, " ")
		if k, v, ok := strings.Cut(line, "\t"); ok && (!found || len(k) < len(key)) {
			key, value, found = k, v, true
		}
		value = strings.TrimSpace(value)
		if !found {
			value = "true"
		}
		if i := strings.Index(value, " #"); i >= 0 {
			value = strings.TrimSpace(value[:i])
		}
		where := fmt.Sprintf("%s:%d", path, n)
		if !plausibleKey(key) {
			// Not echoed: it may be a secret pasted on a line of its own.
			return nil, fmt.Errorf(`config file %s: malformed line: want "flag value", like "ssh-host build.example"`, where)
		}
		if err := checkKey(known, key); err != nil {
			return nil, fmt.Errorf("config file %s: %w", where, err)
		}
		v := out[key]
		out[key] = Value{Value: value, Source: SourceFile, Origin: where, all: append(v.all, value)}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return out, nil
}

// plausibleKey reports whether k looks like a flag name, and so may be
// named in an error: letters, digits, '-', '_' and '.', at most 40 bytes,
// starting with a letter.
func plausibleKey(k string) bool {
	if k == "" || len(k) > 40 {
		return false
	}
	for i, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// SetFlags sets each flag of fs that is not set yet (not given on the
// command line) and has a value from the environment or the config file,
// as ff would: a value the file repeats is set once for every line, in
// order. Flags that Options.Flags set, and settings fs has no flag for,
// are left alone. The error names the flag and where its bad value came
// from.
func (s Settings) SetFlags(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := s.Values[f.Name]
		if err != nil || set[f.Name] || !ok || (v.Source != SourceEnv && v.Source != SourceFile) {
			return
		}
		values := v.all
		if len(values) == 0 {
			values = []string{v.Value}
		}
		for _, val := range values {
			if e := fs.Set(f.Name, val); e != nil {
				err = fmt.Errorf("config: --%s from %s: %w", f.Name, v.Origin, e)
				return
			}
		}
	})
	return err
}
