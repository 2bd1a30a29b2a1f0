package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	"github.com/crabbox-dev/crabbox/provider"
)

// CheckpointKind says what a checkpoint holds and who keeps it.
type CheckpointKind string

const (
	// CheckpointArchive: crabbox's own checkpoint, on any SSH-lease
	// provider: archives of the workdir, its sync state and named paths,
	// kept in the store (Store.CheckpointPart).
	CheckpointArchive CheckpointKind = "archive"
	// CheckpointNative: the whole box saved by its provider (an image, a
	// snapshot; see provider.NativeCheckpointBackend).
	CheckpointNative CheckpointKind = "native"
)

// CheckpointState is where a checkpoint is in its life. A record is
// written as creating before anything is saved and as deleting before
// anything is deleted, so that a crash in between leaves what cleanup
// needs to finish the job.
type CheckpointState string

const (
	CheckpointCreating CheckpointState = "creating"
	CheckpointReady    CheckpointState = "ready"
	CheckpointDeleting CheckpointState = "deleting"
)

// Checkpoint is the record of a saved workspace: enough to start a new
// lease from it (Client.Fork) or put a lease back to it (Lease.Restore).
type Checkpoint struct {
	ID    string          `json:"id"`
	Name  string          `json:"name,omitempty"`
	Kind  CheckpointKind  `json:"kind"`
	State CheckpointState `json:"state"`
	// Provider is the provider of the source lease; Config its locating
	// settings (as the lease's claim recorded them), which reach a native
	// checkpoint's artifact again.
	Provider    string            `json:"provider"`
	Config      map[string]string `json:"config,omitempty"`
	SourceLease string            `json:"sourceLease"`
	// Route and Coordinator are the source lease's: a native checkpoint
	// of a brokered lease is the coordinator's, and so are its forks.
	Route       Route  `json:"route,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
	// Checkout is the local checkout (absolute) whose workdir the
	// checkpoint holds, and SourceWorkdir that workdir on the source box.
	Checkout      string `json:"checkout"`
	SourceWorkdir string `json:"sourceWorkdir"`
	// Paths are the other directories of the box an archive checkpoint
	// holds, as given: absolute, or relative to the box user's home
	// ("~/.cache/go-build").
	Paths []string `json:"paths,omitempty"`
	// Size is what the checkpoint stores: the archives' bytes, or what
	// the provider reports for its artifact.
	Size      int64                        `json:"size"`
	CreatedAt time.Time                    `json:"createdAt"`
	Labels    map[string]string            `json:"labels,omitempty"`
	Artifact  *provider.CheckpointArtifact `json:"artifact,omitempty"`
	// Creator is the process making the checkpoint, while it is
	// creating: cleanup finishes the job of one that is gone.
	Creator *Process `json:"creator,omitempty"`
}

func (s *Store) checkpointDir(id string) string { return filepath.Join(s.dir, "checkpoints", id) }

func (s *Store) checkpointPath(id string) string {
	return filepath.Join(s.checkpointDir(id), "checkpoint.json")
}

// CheckpointPart is the file holding part n of an archive checkpoint.
func (s *Store) CheckpointPart(id string, n int) string {
	return filepath.Join(s.checkpointDir(id), fmt.Sprintf("part-%d.tar.zst", n))
}

// PutCheckpoint writes the checkpoint's record, creating its directory
// (0700) on first write.
func (s *Store) PutCheckpoint(c Checkpoint) error {
	if err := c.check(c.ID); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", c.ID, err)
	}
	if err := os.MkdirAll(s.checkpointDir(c.ID), 0o700); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", c.ID, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode checkpoint %s: %w", c.ID, err)
	}
	if err := atomicfile.Write(s.checkpointPath(c.ID), append(b, '\n')); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", c.ID, err)
	}
	return nil
}

// GetCheckpoint returns the checkpoint with the given ID or name. An
// unknown one is an error for which errors.Is(err, provider.ErrNotFound)
// holds; a name two checkpoints share is ambiguous.
func (s *Store) GetCheckpoint(ref string) (Checkpoint, error) {
	if IsCheckpointID(ref) {
		return s.loadCheckpoint(ref)
	}
	if ref == "" || strings.ContainsAny(ref, "/\\\x00") {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w: want a checkpoint ID (ckp_ and 12 hex digits) or name", ref, provider.ErrNotFound)
	}
	all, err := s.Checkpoints()
	if err != nil {
		return Checkpoint{}, err
	}
	var found []Checkpoint
	for _, c := range all {
		if c.Name == ref {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 0:
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", ref, provider.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return Checkpoint{}, fmt.Errorf("checkpoint name %q is ambiguous: %d checkpoints have it (%s, ...): use an ID", ref, len(found), found[0].ID)
}

func (s *Store) loadCheckpoint(id string) (Checkpoint, error) {
	b, err := os.ReadFile(s.checkpointPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", id, provider.ErrNotFound)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: damaged record %s: %w", id, s.checkpointPath(id), err)
	}
	if err := c.check(id); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: damaged record %s: %w", id, s.checkpointPath(id), err)
	}
	return c, nil
}

// Checkpoints returns every checkpoint, oldest first. Directories that
// are not checkpoints' are ignored; a damaged record is an error.
func (s *Store) Checkpoints() ([]Checkpoint, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "checkpoints"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []Checkpoint
	for _, e := range entries {
		if !IsCheckpointID(e.Name()) {
			continue
		}
		c, err := s.loadCheckpoint(e.Name())
		if errors.Is(err, provider.ErrNotFound) {
			continue // being created or deleted right now
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Checkpoint) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// RemoveCheckpoint removes the checkpoint's record and archives; removing
// a missing one is not an error.
func (s *Store) RemoveCheckpoint(id string) error {
	if !IsCheckpointID(id) {
		return fmt.Errorf("remove checkpoint %q: malformed checkpoint ID", id)
	}
	// The record goes first: a crash half-way leaves archives without a
	// record, which nothing reads.
	if err := os.Remove(s.checkpointPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	if err := os.RemoveAll(s.checkpointDir(id)); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	return nil
}

// check reports what makes c no valid checkpoint record of id.
func (c Checkpoint) check(id string) error {
	switch {
	case c.ID != id || !IsCheckpointID(id):
		return fmt.Errorf("it holds checkpoint ID %q", c.ID)
	case c.Kind != CheckpointArchive && c.Kind != CheckpointNative:
		return fmt.Errorf("unknown kind %q", c.Kind)
	case !slices.Contains([]CheckpointState{CheckpointCreating, CheckpointReady, CheckpointDeleting}, c.State):
		return fmt.Errorf("unknown state %q", c.State)
	case c.Provider == "":
		return errors.New("no provider")
	case c.Kind == CheckpointNative && c.State == CheckpointReady && c.Artifact == nil:
		return errors.New("a native checkpoint without its artifact")
	}
	return nil
}

// SourceClaim is what the checkpoint knows of its source lease's claim:
// enough to reach the lease's backend as that lease was reached (its
// provider, settings, route and coordinator).
func (c Checkpoint) SourceClaim() Claim {
	return Claim{ID: c.SourceLease, Provider: c.Provider, Config: c.Config, Route: c.Route, Coordinator: c.Coordinator}
}
