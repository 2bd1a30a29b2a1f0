//go:build unix

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
)

// fileSpec is one file of the synthetic checkout.
type fileSpec struct {
	Path string // slash-separated, relative to the checkout root
	Size int
}

// planTree lays out n files in nested directories, deterministically from
// seed: most are 1-20 KB, about one in 2,000 (at least one) is 1-4 MB.
func planTree(n int, seed uint64) []fileSpec {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	big := max(1, n/2000)
	specs := make([]fileSpec, 0, n)
	for i := range n {
		depth := 1 + r.IntN(4)
		dir := fmt.Sprintf("mod%02d", r.IntN(20))
		for d := 1; d < depth; d++ {
			dir += fmt.Sprintf("/d%d_%d", d, r.IntN(6))
		}
		size := 1024 + r.IntN(19*1024+1)
		if i < big {
			size = (1 + r.IntN(4)) << 20
		}
		specs = append(specs, fileSpec{Path: fmt.Sprintf("%s/f%06d.dat", dir, i), Size: size})
	}
	return specs
}

// content returns size random bytes determined by seed, the file's path and
// its version (bumped each time the benchmark modifies the file).
func content(seed uint64, path string, version, size int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(version))
	copy(key[16:], path) // long paths are truncated: uniqueness is not required
	b := make([]byte, size)
	rand.NewChaCha8(key).Read(b)
	return b
}

// writeFile writes the file version of spec under root.
func writeFile(root string, seed uint64, s fileSpec, version int) error {
	p := filepath.Join(root, filepath.FromSlash(s.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, content(seed, s.Path, version, s.Size), 0o644)
}

// writeTree writes every file of specs under root, stopping early when ctx
// ends.
func writeTree(ctx context.Context, root string, seed uint64, specs []fileSpec) error {
	for _, s := range specs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeFile(root, seed, s, 0); err != nil {
			return err
		}
	}
	return nil
}

// mutation is one incremental change set: files to rewrite, one to add and
// one to delete.
type mutation struct {
	Changed []fileSpec
	Added   fileSpec
	Deleted fileSpec
}

// planMutation picks, deterministically from seed and iter, 10 small files
// of specs to change, one new file to add and one file to delete. It returns
// the change and the file list after it.
func planMutation(specs []fileSpec, seed uint64, iter int) (mutation, []fileSpec) {
	r := rand.New(rand.NewPCG(seed, uint64(iter)+1))
	var m mutation
	picked := map[int]bool{}
	for len(m.Changed) < 10 || m.Deleted.Path == "" {
		i := r.IntN(len(specs))
		if picked[i] || specs[i].Size > 1<<20 {
			continue
		}
		picked[i] = true
		if len(m.Changed) < 10 {
			m.Changed = append(m.Changed, specs[i])
		} else {
			m.Deleted = specs[i]
		}
	}
	m.Added = fileSpec{Path: fmt.Sprintf("mod%02d/added%04d.dat", r.IntN(20), iter), Size: 1024 + r.IntN(19*1024+1)}
	next := slices.DeleteFunc(slices.Clone(specs), func(s fileSpec) bool { return s.Path == m.Deleted.Path })
	return m, append(next, m.Added)
}

// apply performs m under root; version distinguishes the new contents.
// The changed files are edited in place, as an editor that saves by
// rewriting the file does (VS Code; vim with backupcopy=yes): same inode,
// same size, new content and mtime.
func (m mutation) apply(root string, seed uint64, version int) error {
	for _, s := range m.Changed {
		if err := editInPlace(root, seed, s, version); err != nil {
			return err
		}
	}
	if err := writeFile(root, seed, m.Added, version); err != nil {
		return err
	}
	p := filepath.Join(root, filepath.FromSlash(m.Deleted.Path))
	if err := os.Remove(p); err != nil {
		return err
	}
	// Like git rm, drop directories left empty: git, and so crabbox, has
	// no notion of an empty directory, while rsync would copy it.
	for dir := filepath.Dir(p); dir != root; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// editInPlace overwrites the file of spec under root with its version,
// in place: the file is opened for writing, not replaced.
func editInPlace(root string, seed uint64, s fileSpec, version int) error {
	f, err := os.OpenFile(filepath.Join(root, filepath.FromSlash(s.Path)), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(content(seed, s.Path, version, s.Size), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(s.Size)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
