package docker

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// aptSource is one "deb" entry of the apt configuration.
type aptSource struct {
	uri    string
	suites []string
}

// AptMirror returns the Debian archive this machine's apt configuration
// installs suite from (/etc/apt/sources.list and /etc/apt/sources.list.d,
// one-line and deb822 formats), so a corporate mirror configured there is
// used without naming it again. When no entry carries suite, a Debian
// machine's archive for its own release is taken (an archive serves every
// release). The crabbox repository names no mirror host.
func AptMirror(suite string) (string, error) {
	return aptMirror(os.DirFS("/"), suite)
}

func aptMirror(root fs.FS, suite string) (string, error) {
	sources, err := aptSources(root)
	if err != nil {
		return "", err
	}
	find := func(suite string) string {
		for _, s := range sources {
			if suite != "" && slices.Contains(s.suites, suite) {
				return strings.TrimSuffix(s.uri, "/")
			}
		}
		return ""
	}
	if m := find(suite); m != "" {
		return m, nil
	}
	if id, codename := osRelease(root); id == "debian" && codename != suite {
		if m := find(codename); m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian archive for %s in this machine's apt configuration (/etc/apt/sources.list, /etc/apt/sources.list.d); name one with --mirror URL (CRABBOX_MIRROR)", suite)
}

// aptSources reads the "deb" entries of the apt configuration under root,
// in apt's order.
func aptSources(root fs.FS) ([]aptSource, error) {
	var out []aptSource
	if data, err := fs.ReadFile(root, "etc/apt/sources.list"); err == nil {
		out = append(out, parseOneLine(string(data))...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	entries, err := fs.ReadDir(root, "etc/apt/sources.list.d")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries { // ReadDir sorts by name, as apt does
		name := path.Join("etc/apt/sources.list.d", e.Name())
		var parse func(string) []aptSource
		switch {
		case strings.HasSuffix(e.Name(), ".list"):
			parse = parseOneLine
		case strings.HasSuffix(e.Name(), ".sources"):
			parse = parseDeb822
		default:
			continue
		}
		data, err := fs.ReadFile(root, name)
		if err != nil {
			return nil, err
		}
		out = append(out, parse(string(data))...)
	}
	return out, nil
}

// parseOneLine parses the one-line format: deb [options] uri suite [component...].
func parseOneLine(text string) []aptSource {
	var out []aptSource
	for line := range strings.Lines(text) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options, which may hold spaces
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 {
			out = append(out, aptSource{uri: f[0], suites: []string{f[1]}})
		}
	}
	return out
}

// parseDeb822 parses the deb822 format: stanzas of Types, URIs, Suites
// (and Enabled) fields separated by blank lines.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if slices.Contains(strings.Fields(fields["types"]), "deb") && !strings.EqualFold(fields["enabled"], "no") {
			for _, uri := range strings.Fields(fields["uris"]) {
				out = append(out, aptSource{uri: uri, suites: strings.Fields(fields["suites"])})
			}
		}
		clear(fields)
		last = ""
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t': // a continuation
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = strings.ToLower(strings.TrimSpace(k))
				fields[last] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return out
}

// osRelease returns the ID and VERSION_CODENAME of /etc/os-release.
func osRelease(root fs.FS) (id, codename string) {
	data, err := fs.ReadFile(root, "etc/os-release")
	if err != nil {
		return "", ""
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_CODENAME":
			codename = v
		}
	}
	return id, codename
}
