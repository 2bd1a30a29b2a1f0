package sync

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanOf(t *testing.T) {
	files := []File{
		{Path: "README.md", Size: 10},
		{Path: "src/a.go", Size: 100}, {Path: "src/b/c.go", Size: 200},
		{Path: "docs/x.md", Size: 50},
	}
	got := planOf("/repo", files)
	want := Plan{Root: "/repo", Files: 4, Bytes: 360, TopDirs: []DirSize{
		{Dir: "src", Files: 2, Bytes: 300}, {Dir: "docs", Files: 1, Bytes: 50}, {Dir: ".", Files: 1, Bytes: 10},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("planOf (-want +got):\n%s", diff)
	}
}

func TestPlanCheck(t *testing.T) {
	p := Plan{Files: 120, Bytes: 3 << 20, TopDirs: []DirSize{{Dir: "node_modules", Files: 100, Bytes: 2 << 20}}}
	tests := []struct {
		name        string
		limits      Limits
		wantWarning string
		wantErr     string
	}{
		{"under", Limits{WarnFiles: 200, MaxFiles: 300}, "", ""},
		{"warn on files", Limits{WarnFiles: 100, MaxFiles: 300}, "large sync: 120 files, 3.0 MiB (largest: node_modules/ 100 files 2.0 MiB)", ""},
		{"warn on bytes", Limits{WarnBytes: 1 << 20}, "large sync", ""},
		{"fail on files", Limits{WarnFiles: 10, MaxFiles: 100}, "", "--force-sync-large"},
		{"fail on bytes", Limits{MaxBytes: 1 << 20}, "", "node_modules/"},
	}
	for _, tt := range tests {
		warning, err := p.Check(tt.limits)
		if !strings.HasPrefix(warning, tt.wantWarning) || (tt.wantWarning == "" && warning != "") {
			t.Errorf("%s: warning = %q, want %q", tt.name, warning, tt.wantWarning)
		}
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: err = %v", tt.name, err)
		case tt.wantErr != "" && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: err = %v, want ErrTooLarge mentioning %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 5 << 30: "5.0 GiB", 1536 << 20: "1.5 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPreparedHolds(t *testing.T) {
	p := &Prepared{files: []File{{Path: "a.txt"}, {Path: "src/b/c.go"}, {Path: "srcx/d"}}}
	for dir, want := range map[string]bool{
		"": true, ".": true, "src": true, "src/b": true, "src/b/": true,
		"sr": false, "src/c": false, "empty": false, "a.txt/x": false,
	} {
		if got := p.Holds(t.Context(), dir); got != want {
			t.Errorf("Holds(%q) = %v, want %v", dir, got, want)
		}
	}
}
