package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/units"
)

// Limits are the guardrails that stop an accidental huge sync before any
// byte moves: past a Warn limit the sync goes on with a warning, past a Max
// limit it fails unless forced.
//
// A push applies them differently: the Max limits to the whole file set,
// before it connects, since a checkout that large is a mistake (an
// unignored build or dependency directory) whatever the box holds; the
// Warn limits to what it is about to send, once it knows the box's state,
// so that a first sync or a big change warns and an unchanged rerun of a
// large checkout stays quiet. Plan.Check applies both to a whole plan.
type Limits struct {
	WarnFiles int
	WarnBytes int64
	MaxFiles  int
	MaxBytes  int64
}

// DefaultLimits warns at 50,000 files or 5 GiB and fails at 150,000 files
// or 20 GiB.
func DefaultLimits() Limits {
	return Limits{WarnFiles: 50_000, WarnBytes: 5 << 30, MaxFiles: 150_000, MaxBytes: 20 << 30}
}

// ErrTooLarge is returned (wrapped) when a sync exceeds its Max limits.
var ErrTooLarge = errors.New("sync too large")

// DirSize is the share of one top-level directory in a plan.
type DirSize struct {
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// Plan is what a sync of a checkout would send, computed without a box.
type Plan struct {
	Root  string `json:"root"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// Excluded is the number of files the built-in excludes,
	// .crabboxignore and the configured excludes left out (outside git, an
	// excluded directory counts once: it is not read).
	Excluded int `json:"excluded"`
	// TopDirs are the largest top-level directories by bytes (files at the
	// top level count under "."), at most topDirs of them.
	TopDirs []DirSize `json:"topDirs"`
}

const topDirs = 10

// MakePlan computes the plan for syncing root with no configured excludes.
func MakePlan(ctx context.Context, root string) (Plan, error) {
	return MakePlanWith(ctx, root, FileSetOptions{})
}

// MakePlanWith computes the plan for syncing root with opts, the file set
// Push sends given Options.Exclude == opts.Exclude.
func MakePlanWith(ctx context.Context, root string, opts FileSetOptions) (Plan, error) {
	files, excluded, err := fileSet(ctx, root, runtime.GOOS == "windows", opts)
	if err != nil {
		return Plan{}, fmt.Errorf("plan sync of %s: %w", root, err)
	}
	p := planOf(root, files)
	p.Excluded = excluded
	return p, nil
}

func planOf(root string, files []File) Plan {
	p := Plan{Root: root}
	dirs := map[string]*DirSize{}
	for _, f := range files {
		dir := "."
		if i := strings.IndexByte(f.Path, '/'); i >= 0 {
			dir = f.Path[:i]
		}
		d := dirs[dir]
		if d == nil {
			d = &DirSize{Dir: dir}
			dirs[dir] = d
		}
		d.Files++
		d.Bytes += f.Size
		p.Files++
		p.Bytes += f.Size
	}
	for _, d := range dirs {
		p.TopDirs = append(p.TopDirs, *d)
	}
	slices.SortFunc(p.TopDirs, func(a, b DirSize) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Files, a.Files), cmp.Compare(a.Dir, b.Dir))
	})
	if len(p.TopDirs) > topDirs {
		p.TopDirs = p.TopDirs[:topDirs]
	}
	return p
}

// Check applies the limits: it returns a warning past a Warn limit and an
// error wrapping ErrTooLarge past a Max limit, naming the largest
// directories and how to go ahead anyway.
func (p Plan) Check(l Limits) (warning string, err error) {
	size := fmt.Sprintf("%d files, %s", p.Files, FormatBytes(p.Bytes))
	if (l.MaxFiles > 0 && p.Files > l.MaxFiles) || (l.MaxBytes > 0 && p.Bytes > l.MaxBytes) {
		return "", fmt.Errorf("%w: %s is over the limit of %d files or %s (largest: %s); exclude them in .gitignore, .crabboxignore or sync.exclude, or pass --force-sync-large",
			ErrTooLarge, size, l.MaxFiles, FormatBytes(l.MaxBytes), p.largest())
	}
	if (l.WarnFiles > 0 && p.Files > l.WarnFiles) || (l.WarnBytes > 0 && p.Bytes > l.WarnBytes) {
		return fmt.Sprintf("large sync: %s (largest: %s)", size, p.largest()), nil
	}
	return "", nil
}

func (p Plan) largest() string {
	var parts []string
	for _, d := range p.TopDirs[:min(3, len(p.TopDirs))] {
		parts = append(parts, fmt.Sprintf("%s/ %d files %s", d.Dir, d.Files, FormatBytes(d.Bytes)))
	}
	return strings.Join(parts, ", ")
}

// FormatBytes renders n in binary units: "512 B", "1.5 KiB", "2.0 GiB".
func FormatBytes(n int64) string { return units.Bytes(n) }

// warnLarge warns when the files a push is about to send, send (indexes in
// local), pass a Warn limit.
func (s *session) warnLarge(local []Entry, send []int) {
	if s.opts.Warn == nil || len(send) == 0 {
		return
	}
	limits := DefaultLimits()
	if s.opts.Limits != nil {
		limits = *s.opts.Limits
	}
	files := make([]File, len(send))
	for i, j := range send {
		files[i] = File{Path: local[j].Path, Size: local[j].Size}
	}
	p := planOf(s.opts.Root, files)
	if (limits.WarnFiles > 0 && p.Files > limits.WarnFiles) || (limits.WarnBytes > 0 && p.Bytes > limits.WarnBytes) {
		s.opts.Warn(fmt.Sprintf("large sync: sending %d of %d files, %s (largest: %s)",
			p.Files, len(local), FormatBytes(p.Bytes), p.largest()))
	}
}
