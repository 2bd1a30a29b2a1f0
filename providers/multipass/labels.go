package multipass

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
)

// LabelStore keeps the labels of crabbox's instances, as tags
// (cloud.TagCodec), since multipass instances carry none. An instance
// without an entry is not crabbox's, whatever its name.
type LabelStore interface {
	// Read returns the tags of instance name; ok is false when there is
	// no entry.
	Read(name string) (tags []string, ok bool, err error)
	// Write replaces the tags of instance name.
	Write(name string, tags []string) error
	// Remove removes the entry of instance name; a missing one is no
	// error.
	Remove(name string) error
}

// instanceName matches the names of crabbox's instances (tagcloud.Name):
// crabbox- and a lease ID with '_' as '-', valid multipass names and file
// names alike.
var instanceName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^crabbox-[a-z0-9][a-z0-9-]{0,54}[a-z0-9]$`) })

// FileLabels is a LabelStore in a directory on the machine running
// multipass: one JSON file per instance, <Dir>/<instance>.json, written
// whole (a temporary file renamed into place) and readable only by its
// owner.
type FileLabels struct{ Dir string }

// labelFile is the content of one entry.
type labelFile struct {
	Instance string   `json:"instance"`
	Tags     []string `json:"tags"`
}

func (s FileLabels) file(name string) (string, error) {
	if !instanceName().MatchString(name) {
		return "", fmt.Errorf("instance name %q is not a crabbox instance name", name)
	}
	return filepath.Join(s.Dir, name+".json"), nil
}

// Read reads the tags of instance name.
func (s FileLabels) Read(name string) ([]string, bool, error) {
	file, err := s.file(name)
	if err != nil {
		return nil, false, err
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the labels of instance %s: %w", name, err)
	}
	var lf labelFile
	if err := json.Unmarshal(data, &lf); err != nil || lf.Instance != name {
		return nil, false, fmt.Errorf("labels of instance %s: %s is not a label file of this instance", name, file)
	}
	return lf.Tags, true, nil
}

// Write writes the tags of instance name.
func (s FileLabels) Write(name string, tags []string) error {
	file, err := s.file(name)
	if err != nil {
		return err
	}
	data, err := json.Marshal(labelFile{Instance: name, Tags: slices.Clone(tags)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("write the labels of instance %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(s.Dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("write the labels of instance %s: %w", name, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write the labels of instance %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write the labels of instance %s: %w", name, err)
	}
	return nil
}

// Remove removes the entry of instance name.
func (s FileLabels) Remove(name string) error {
	file, err := s.file(name)
	if err != nil {
		return err
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the labels of instance %s: %w", name, err)
	}
	return nil
}
