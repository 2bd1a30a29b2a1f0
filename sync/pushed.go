package sync

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// The pushed file (the cache file's name plus pushedSuffix) keeps the
// manifest of the last push from this checkout with its fingerprint, so
// that a box whose fingerprint it is need not send its manifest back (see
// sessionScript's KNOWN): on a large checkout, reading the box's manifest
// is most of what an incremental push costs besides the listing.
//
// It is the header, the fingerprint and a newline, then the manifest as
// the box keeps it (encodeManifest), checked like the box's when read.
const (
	pushedSuffix = ".pushed"
	pushedHeader = "crabbox pushed manifest 2\n"
)

// formatPushed is the pushed file of fingerprint fp and its manifest, as
// encodeManifest made it.
func formatPushed(fp string, manifest []byte) []byte {
	return append([]byte(pushedHeader+fp+"\n"), manifest...)
}

// pushedFingerprint returns the fingerprint of the pushed file, or "".
func pushedFingerprint(name string) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, len(pushedHeader)+65)
	if _, err := io.ReadFull(f, head); err != nil {
		return ""
	}
	fp, ok := bytes.CutPrefix(head, []byte(pushedHeader))
	if !ok || fp[64] != '\n' || !isHash(string(fp[:64])) {
		return ""
	}
	return string(fp[:64])
}

// loadPushed reads the pushed file's entries, which must be those of
// fingerprint fp.
func loadPushed(name, fp string) ([]Entry, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	entries, err := parsePushed(data, fp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return entries, nil
}

func parsePushed(data []byte, fp string) ([]Entry, error) {
	rest, ok := bytes.CutPrefix(data, []byte(pushedHeader+fp+"\n"))
	if !ok {
		return nil, fmt.Errorf("not the manifest of fingerprint %s", fp)
	}
	return parseManifest(rest)
}

func savePushed(name, fp string, manifest []byte) error {
	return atomicfile.WriteCache(name, formatPushed(fp, manifest))
}
