package testgateway

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// NoSecretsIn fails t for each of secrets (the logins a gateway's tokens
// minted) found in a regular file under dir (a client's state directory)
// or in one of texts (logs, errors). It fails t when secrets is empty: a
// check that saw no login proves nothing.
func NoSecretsIn(t testing.TB, secrets []string, dir string, texts ...string) {
	t.Helper()
	if len(secrets) == 0 {
		t.Fatal("no login was minted")
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(body, []byte(s)) {
				t.Errorf("%s holds a login token", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("text #%d holds a login token: %q", i, text)
			}
		}
	}
}
