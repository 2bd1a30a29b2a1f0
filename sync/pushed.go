package sync

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// The pushed file (the cache file's name plus pushedSuffix) keeps the
// manifest of the last push from this checkout with its fingerprint, so
// that a box whose fingerprint it is need not send its manifest back (see
// sessionScript's KNOWN): on a large checkout, reading the box's manifest
// is most of what an incremental push costs besides the listing.
//
// It is the header, the fingerprint and a newline, then the entries:
// path, mode, size, mtime and link target (strings as uvarint length and
// bytes, numbers as varints), and a regular file's SHA-256 as 32 bytes.
// Like the box's manifest, it is checked before it is trusted.
const (
	pushedSuffix = ".pushed"
	pushedHeader = "crabbox pushed manifest 1\n"
)

func formatPushed(fp string, entries []Entry) []byte {
	b := make([]byte, 0, len(pushedHeader)+65+len(entries)*80)
	b = append(b, pushedHeader...)
	b = append(b, fp...)
	b = append(b, '\n')
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, e := range entries {
		str(e.Path)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendVarint(b, e.Size)
		b = binary.AppendVarint(b, e.MTime)
		str(e.Link)
		sum, err := hex.DecodeString(e.SHA256)
		if err != nil || len(sum) != 32 {
			sum = nil
		}
		str(string(sum))
	}
	return b
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
	all, ok := strings.CutPrefix(string(data), pushedHeader+fp+"\n")
	if !ok {
		return nil, fmt.Errorf("not the manifest of fingerprint %s", fp)
	}
	off := 0
	bad := false
	uvarint := func() uint64 {
		v, n := binary.Uvarint([]byte(all[off:min(len(all), off+binary.MaxVarintLen64)]))
		if n <= 0 {
			bad = true
			return 0
		}
		off += n
		return v
	}
	varint := func() int64 {
		v, n := binary.Varint([]byte(all[off:min(len(all), off+binary.MaxVarintLen64)]))
		if n <= 0 {
			bad = true
			return 0
		}
		off += n
		return v
	}
	str := func() string {
		n := uvarint()
		if bad || n > uint64(len(all)-off) {
			bad = true
			return ""
		}
		s := all[off : off+int(n)]
		off += int(n)
		return s
	}
	var entries []Entry
	for off < len(all) && !bad {
		e := Entry{Path: str(), Mode: fs.FileMode(uvarint()), Size: varint(), MTime: varint(), Link: str()}
		if sum := str(); sum != "" {
			e.SHA256 = hex.EncodeToString([]byte(sum))
		}
		if bad {
			break
		}
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		if n := len(entries); n > 0 && entries[n-1].Path >= e.Path {
			return nil, fmt.Errorf("path %q out of order or repeated", e.Path)
		}
		entries = append(entries, e)
	}
	if bad {
		return nil, errMalformedPushed
	}
	return entries, nil
}

var errMalformedPushed = errors.New("malformed pushed manifest")

func savePushed(name, fp string, entries []Entry) error {
	return atomicfile.Write(name, formatPushed(fp, entries))
}
