package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// Login is a coordinator sign-in saved by crabbox login: the coordinator's
// URL and the user token it accepted. Load uses it when the environment
// names no coordinator; it never mixes the two (a token saved for one
// coordinator is never sent to a URL from the environment).
type Login struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// String hides the token.
func (l Login) String() string { return fmt.Sprintf("{URL:%s Token:<redacted>}", l.URL) }

// maxLoginFile bounds the login file Load reads.
const maxLoginFile = 64 << 10

// LoginFile is where crabbox login saves the sign-in: crabbox/login.json in
// the user's config directory (read from env, as DefaultFile does); empty
// when that directory is unknown. Unlike the config file, no variable or
// flag moves it: a repository cannot point crabbox at a login of its
// choosing.
func LoginFile(env []string) string {
	dir := userConfigDir(parseEnv(env))
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "crabbox", "login.json")
}

// ReadLogin reads the login file at path; ok is false when there is none.
func ReadLogin(path string) (l Login, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Login{}, false, nil
	}
	if err != nil {
		return Login{}, false, fmt.Errorf("login file: %w", err)
	}
	if len(b) > maxLoginFile {
		return Login{}, false, fmt.Errorf("login file %s: larger than %d bytes; remove it and run crabbox login again", path, maxLoginFile)
	}
	if err := json.Unmarshal(b, &l); err != nil || l.URL == "" || l.Token == "" {
		return Login{}, false, fmt.Errorf("login file %s: not a saved login (want {\"url\", \"token\"}); remove it and run crabbox login again", path)
	}
	return l, true, nil
}

// SaveLogin writes l to path with mode 0600 (its directory 0700), replacing
// what was there in one step.
func SaveLogin(path string, l Login) error {
	if l.URL == "" || l.Token == "" {
		return errors.New("save login: URL and token are required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save login: %w", err)
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("save login: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n')); err != nil {
		return fmt.Errorf("save login: %w", err)
	}
	return nil
}

// RemoveLogin removes the login file at path; removed is false when there
// was none.
func RemoveLogin(path string) (removed bool, err error) {
	err = os.Remove(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("remove login: %w", err)
	}
	return true, nil
}
