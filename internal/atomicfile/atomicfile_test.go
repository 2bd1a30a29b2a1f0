package atomicfile

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWrite(t *testing.T) {
	for name, write := range map[string]func(string, []byte) error{"Write": Write, "WriteCache": WriteCache} {
		t.Run(name, func(t *testing.T) { testWrite(t, write) })
	}
}

func testWrite(t *testing.T, write func(string, []byte) error) {
	path := filepath.Join(t.TempDir(), "new", "dir", "file")
	for _, content := range []string{"first", "second"} {
		if err := write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("content = %q (%v), want %q", got, err, content)
		}
	}
	if runtime.GOOS != "windows" {
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporaries left)", len(entries))
	}
}
