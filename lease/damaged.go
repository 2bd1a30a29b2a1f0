package lease

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrDamaged is what errors.Is finds in the error of a damaged claim.
var ErrDamaged = errors.New("claim is damaged")

// DamagedClaim is a claim file the store cannot use: it does not parse (cut
// short by a crash, say), names another lease, has an unknown state or no
// provider, or cannot be read. One damaged claim never breaks the others:
// List leaves it out, and the store moves its file, bytes unchanged, into
// the damaged directory (<state>/leases/damaged/<id>.<time>.json), where it
// stays for inspection until the lease is deleted. A file that cannot be
// read stays where it is. A damaged claim's lease is still this client's:
// its box is found through the provider by lease ID.
type DamagedClaim struct {
	ID   string // the lease ID its file name gives
	Path string // where the file is now
	Err  error  // what is wrong with it
}

func (d *DamagedClaim) Error() string {
	return fmt.Sprintf("lease %s: %v: %v; the file is kept as %s", d.ID, ErrDamaged, d.Err, d.Path)
}

// Unwrap gives ErrDamaged and the cause.
func (d *DamagedClaim) Unwrap() []error { return []error{ErrDamaged, d.Err} }

// setAsideTime names the files of damaged claims; it sorts in time order.
const setAsideTime = "20060102T150405Z"

func (s *Store) damagedDir() string { return filepath.Join(s.dir, "leases", "damaged") }

// setAside moves the damaged claim file of lease id at path into the
// damaged directory, never over another file there, and returns it as a
// *DamagedClaim.
func (s *Store) setAside(id, path string, why error) *DamagedClaim {
	d := &DamagedClaim{ID: id, Path: path, Err: why}
	dir := s.damagedDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		d.Err = fmt.Errorf("%w (setting it aside failed: %v)", why, err)
		return d
	}
	base := id + "." + s.clock.Now().UTC().Format(setAsideTime)
	dst := filepath.Join(dir, base+".json")
	for n := 2; ; n++ {
		if _, err := os.Lstat(dst); err != nil {
			break // free (or unknowable: then Rename says why)
		}
		dst = filepath.Join(dir, base+"."+strconv.Itoa(n)+".json")
	}
	if err := os.Rename(path, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Another process set it aside first.
			if other := s.setAsideOf(id); other != nil {
				return other
			}
		}
		d.Err = fmt.Errorf("%w (setting it aside failed: %v)", why, err)
		return d
	}
	d.Path = dst
	return d
}

// setAsidePaths are the files of lease id in the damaged directory, oldest
// first.
func (s *Store) setAsidePaths(id string) []string {
	entries, err := os.ReadDir(s.damagedDir())
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), id+"."); ok && strings.HasSuffix(rest, ".json") {
			out = append(out, filepath.Join(s.damagedDir(), e.Name()))
		}
	}
	slices.SortFunc(out, compareSetAside)
	return out
}

// compareSetAside orders the set-aside files of one lease by time, then by
// the number that keeps two of one second apart.
func compareSetAside(a, b string) int {
	key := func(p string) (string, int) {
		parts := strings.Split(filepath.Base(p), ".")
		n := 1
		if len(parts) == 4 {
			n, _ = strconv.Atoi(parts[2])
		}
		return parts[1], n
	}
	at, an := key(a)
	bt, bn := key(b)
	if c := strings.Compare(at, bt); c != 0 {
		return c
	}
	if an != bn {
		return an - bn
	}
	return strings.Compare(a, b)
}

// setAsideOf reports the newest damaged claim of lease id that was set
// aside, or nil if there is none.
func (s *Store) setAsideOf(id string) *DamagedClaim {
	paths := s.setAsidePaths(id)
	if len(paths) == 0 {
		return nil
	}
	return s.judge(id, paths[len(paths)-1])
}

// judge says what is wrong with the set-aside claim file of lease id.
func (s *Store) judge(id, path string) *DamagedClaim {
	b, err := os.ReadFile(path)
	if err == nil {
		if _, err = decode(id, b); err == nil {
			err = errors.New("set aside as damaged, though it reads as a claim now")
		}
	}
	return &DamagedClaim{ID: id, Path: path, Err: err}
}

// Damaged returns the damaged claims: those set aside, oldest first, and
// any still in place that would be. It changes nothing.
func (s *Store) Damaged() ([]DamagedClaim, error) {
	var out []DamagedClaim
	err := s.locked(func() error {
		entries, err := os.ReadDir(s.damagedDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("list damaged claims in %s: %w", s.dir, err)
		}
		var set []string
		for _, e := range entries {
			if id, _, ok := strings.Cut(e.Name(), "."); ok && IsID(id) && strings.HasSuffix(e.Name(), ".json") {
				set = append(set, filepath.Join(s.damagedDir(), e.Name()))
			}
		}
		slices.SortFunc(set, compareSetAside)
		for _, p := range set {
			id, _, _ := strings.Cut(filepath.Base(p), ".")
			out = append(out, *s.judge(id, p))
		}
		ids, err := s.claimIDs()
		if err != nil {
			return err
		}
		for _, id := range ids {
			path := s.claimPath(id)
			b, err := os.ReadFile(path)
			if err == nil {
				_, err = decode(id, b)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				out = append(out, DamagedClaim{ID: id, Path: path, Err: err})
			}
		}
		return nil
	})
	return out, err
}
