package ssh

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"

	"github.com/gofrs/flock"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Record states.
const (
	// stateAcquiring: the record is written before the host is touched, so a
	// crash in between leaves a record that release and cleanup can finish.
	stateAcquiring = "acquiring"
	// stateReady: the lease's work directory exists.
	stateReady = "ready"
)

// record is the provider's local memory of one lease. It holds no secrets:
// the key file is named, not copied.
type record struct {
	LeaseID       string            `json:"leaseId"`
	Slug          string            `json:"slug,omitempty"`
	State         string            `json:"state"`
	Host          string            `json:"host"`
	Port          int               `json:"port"`
	User          string            `json:"user"`
	KeyFile       string            `json:"keyFile"`
	HostKey       string            `json:"hostKey,omitempty"`
	WorkRoot      string            `json:"workRoot"`
	Keep          bool              `json:"keep,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	CreatedAt     time.Time         `json:"createdAt"`
	LastTouchedAt time.Time         `json:"lastTouchedAt"`
	ExpiresAt     time.Time         `json:"expiresAt"`
}

// addr is the record's host:port.
func (r record) addr() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// leaseDir is the only remote path the lease owns: <WorkRoot>/<LeaseID>. It
// re-checks both parts, since the record is a file on disk.
func (r record) leaseDir() (string, error) {
	if !lease.IsID(r.LeaseID) {
		return "", fmt.Errorf("lease ID %q is malformed", r.LeaseID)
	}
	root, err := checkWorkRoot(r.WorkRoot)
	if err != nil {
		return "", err
	}
	return root + "/" + r.LeaseID, nil
}

// target renders the record as the provider-neutral lease target.
func (r record) target() provider.LeaseTarget {
	return provider.LeaseTarget{
		LeaseID:   r.LeaseID,
		Slug:      r.Slug,
		Provider:  Name,
		Host:      r.Host,
		Port:      r.Port,
		User:      r.User,
		KeyFile:   r.KeyFile,
		HostKey:   r.HostKey,
		WorkRoot:  r.WorkRoot,
		State:     r.State,
		Labels:    maps.Clone(r.Labels),
		CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt,
	}
}

// records is the directory of lease records, one JSON file per lease, each
// written atomically with mode 0600. Changes happen under a file lock shared
// by every process using the same state directory.
type records struct {
	dir      string
	lockPath string
}

func (s *records) path(id string) string { return filepath.Join(s.dir, id+".json") }

// create stores a new record; an existing lease ID or slug is ErrConflict.
func (s *records) create(r record) error {
	return withLock(s.lockPath, func() error {
		all, err := s.list()
		if err != nil {
			return err
		}
		for _, o := range all {
			if o.LeaseID == r.LeaseID {
				return fmt.Errorf("lease %s: %w: a record already exists", r.LeaseID, provider.ErrConflict)
			}
			if r.Slug != "" && o.Slug == r.Slug {
				return fmt.Errorf("lease %s: slug %q: %w: in use by lease %s", r.LeaseID, r.Slug, provider.ErrConflict, o.LeaseID)
			}
		}
		return s.write(r)
	})
}

// update applies fn to the stored record and writes it back.
func (s *records) update(id string, fn func(*record)) (record, error) {
	var r record
	err := withLock(s.lockPath, func() error {
		var err error
		if r, err = s.get(id); err != nil {
			return err
		}
		fn(&r)
		r.LeaseID = id
		return s.write(r)
	})
	return r, err
}

// get reads one record; a missing one is ErrNotFound.
func (s *records) get(id string) (record, error) {
	if !lease.IsID(id) {
		return record{}, fmt.Errorf("lease %q: %w", id, provider.ErrNotFound)
	}
	r, err := s.read(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return record{}, fmt.Errorf("lease %s: %w", id, provider.ErrNotFound)
	}
	return r, err
}

// find returns the record whose lease ID or slug is ref.
func (s *records) find(ref string) (record, error) {
	if lease.IsID(ref) {
		return s.get(ref)
	}
	if ref != "" && lease.ValidSlug(ref) {
		all, err := s.list()
		if err != nil {
			return record{}, err
		}
		for _, r := range all {
			if r.Slug == ref {
				return r, nil
			}
		}
	}
	return record{}, fmt.Errorf("lease %q: %w", ref, provider.ErrNotFound)
}

// delete removes the record; a missing one is not an error.
func (s *records) delete(id string) error {
	return withLock(s.lockPath, func() error {
		if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete record of lease %s: %w", id, err)
		}
		return nil
	})
}

// list returns every record, oldest first. A missing directory is empty.
func (s *records) list() ([]record, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list lease records in %s: %w", s.dir, err)
	}
	var out []record
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !lease.IsID(id) {
			continue
		}
		r, err := s.read(filepath.Join(s.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b record) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.LeaseID, b.LeaseID)
	})
	return out, nil
}

func (s *records) read(path string) (record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("read lease record %s: %w", path, err)
	}
	if want := strings.TrimSuffix(filepath.Base(path), ".json"); r.LeaseID != want {
		return record{}, fmt.Errorf("read lease record %s: it names lease %q", path, r.LeaseID)
	}
	return r, nil
}

func (s *records) write(r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record of lease %s: %w", r.LeaseID, err)
	}
	if err := atomicfile.Write(s.path(r.LeaseID), append(b, '\n')); err != nil {
		return fmt.Errorf("write record of lease %s: %w", r.LeaseID, err)
	}
	return nil
}

// withLock runs fn holding the file lock at path, creating its directory.
func withLock(path string, fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	l := flock.New(path)
	if err := l.Lock(); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer l.Unlock()
	return fn()
}
