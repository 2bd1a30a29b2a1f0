package sync

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strconv"
)

// A sparse file (one whose holes, runs of zeros the file system does not
// store, add up to at least minHoles) is sent as its data and a map of
// where the data goes, in the PAX format GNU tar and bsdtar (libarchive)
// extract as a sparse file (GNU.sparse.major=1, minor=0): the box gets the
// same holes, and neither side reads, sends or writes the zeros. Go's
// archive/tar writes no sparse entries, so the entry's headers are written
// here, between the tar.Writer's entries.

// minHoles is how much of a file must be holes for it to be sent sparse.
const minHoles = 1 << 20

// region is a run of a sparse file's data.
type region struct{ off, n int64 }

// writeSparse adds the regular file f, listed as e, to the archive tw
// writes to w, as a sparse entry named name with the data regions. It returns what
// writeFile returns: the file's length, the SHA-256 of its whole content
// (holes read as zeros), its stamp; a file that shrinks while it is read
// has its entry padded and fails with errShrank.
func writeSparse(tw *tar.Writer, w io.Writer, f *regularFile, e Entry, name string, regions []region, buf []byte) (int64, string, fileStamp, bool, error) {
	size := f.info.size
	// The map: the number of regions, then each one's offset and length,
	// one number a line, padded to a block. A last, empty region at the
	// end tells the extractor the length of a file that ends in a hole.
	sparseMap := make([]region, 0, len(regions)+1)
	sparseMap = append(sparseMap, regions...)
	if len(regions) == 0 || regions[len(regions)-1].off+regions[len(regions)-1].n < size {
		sparseMap = append(sparseMap, region{size, 0})
	}
	m := strconv.AppendInt(nil, int64(len(sparseMap)), 10)
	m = append(m, '\n')
	var data int64
	for _, r := range sparseMap {
		m = append(strconv.AppendInt(m, r.off, 10), '\n')
		m = append(strconv.AppendInt(m, r.n, 10), '\n')
		data += r.n
	}
	m = append(m, make([]byte, blockPad(int64(len(m))))...)
	stored := int64(len(m)) + data

	// Finish the previous entry, then write this one's headers.
	if err := tw.Flush(); err != nil {
		return 0, "", fileStamp{}, false, err
	}
	dir, base := path.Split(name)
	records := paxRecords([][2]string{
		{"GNU.sparse.major", "1"},
		{"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", name},
		{"GNU.sparse.realsize", strconv.FormatInt(size, 10)},
		{"size", strconv.FormatInt(stored, 10)},
	})
	entryName := ustarName(dir+"GNUSparseFile.0/", base)
	var head []byte
	head = append(head, ustarHeader(ustarName(dir+"PaxHeaders.0/", base), 'x', 0o644, int64(len(records)), f.info.mtime/1e9)...)
	head = append(head, records...)
	head = append(head, make([]byte, blockPad(int64(len(records))))...)
	head = append(head, ustarHeader(entryName, '0', int64(e.Mode.Perm()), stored, f.info.mtime/1e9)...)
	head = append(head, m...)
	if _, err := w.Write(head); err != nil {
		return 0, "", fileStamp{}, false, err
	}

	h := sha256.New()
	var at int64 // the content hashed so far
	shrank := false
	for _, r := range regions {
		if err := hashZeros(h, r.off-at, buf); err != nil {
			return 0, "", fileStamp{}, false, err
		}
		for k := int64(0); k < r.n; {
			chunk := buf[:min(int64(len(buf)), r.n-k)]
			got := 0
			if !shrank {
				n, err := f.ReadAt(chunk, r.off+k)
				got = n
				switch {
				case errors.Is(err, io.EOF):
					shrank = true
				case err != nil:
					return 0, "", fileStamp{}, false, fmt.Errorf("send %q: %w", e.Path, err)
				}
			}
			if got == 0 {
				// Shrank: pad with zeros to keep the archive whole.
				clear(chunk)
				got = len(chunk)
			}
			h.Write(chunk[:got])
			if _, err := w.Write(chunk[:got]); err != nil {
				return 0, "", fileStamp{}, false, err
			}
			k += int64(got)
		}
		at = r.off + r.n
	}
	if err := hashZeros(h, size-at, buf); err != nil {
		return 0, "", fileStamp{}, false, err
	}
	if _, err := w.Write(make([]byte, blockPad(stored))); err != nil {
		return 0, "", fileStamp{}, false, err
	}
	if shrank {
		return size, "", fileStamp{}, false, fmt.Errorf("%q %w", e.Path, errShrank)
	}
	return size, hex.EncodeToString(h.Sum(nil)), fileStamp{mtime: f.info.mtime, ino: f.info.ino}, true, nil
}

// hashZeros feeds n zero bytes to h; buf is scratch space.
func hashZeros(h hash.Hash, n int64, buf []byte) error {
	clear(buf)
	for n > 0 {
		k := min(int64(len(buf)), n)
		h.Write(buf[:k])
		n -= k
	}
	return nil
}

// blockPad is the padding after n bytes to the next 512-byte block.
func blockPad(n int64) int64 { return -n & 511 }

// paxRecords formats PAX extended header records, "LEN KEY=VALUE\n" each,
// LEN counting the whole record.
func paxRecords(kv [][2]string) []byte {
	var out []byte
	for _, r := range kv {
		rest := len(r[0]) + len(r[1]) + 3 // " ", "=", "\n"
		n := rest + len(strconv.Itoa(rest))
		if len(strconv.Itoa(n)) > len(strconv.Itoa(rest)) {
			n++
		}
		out = append(strconv.AppendInt(out, int64(n), 10), ' ')
		out = append(append(append(append(out, r[0]...), '='), r[1]...), '\n')
	}
	return out
}

// ustarName is prefix+base cut to the 100 bytes of a ustar header's name,
// which the PAX records replace: base loses its start, then prefix.
func ustarName(prefix, base string) string {
	if len(prefix)+len(base) <= 100 {
		return prefix + base
	}
	if len(prefix) < 100 {
		return prefix + base[len(base)-(100-len(prefix)):]
	}
	return "GNUSparseFile.0/" + base[len(base)-min(len(base), 100-len("GNUSparseFile.0/")):]
}

// ustarHeader is a ustar header block: name, typeflag, permissions, size
// (up to 8 GiB; a larger one is left to a PAX size record) and mtime in
// seconds, owned by uid and gid 0 as tar.Writer's entries are.
func ustarHeader(name string, typeflag byte, mode, size, mtime int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	octal := func(field []byte, v int64) {
		s := strconv.FormatInt(v, 8)
		if len(s) > len(field)-1 || v < 0 {
			s = "0"
		}
		for i := range field[:len(field)-1] {
			field[i] = '0'
		}
		copy(field[len(field)-1-len(s):], s)
		field[len(field)-1] = 0
	}
	octal(b[100:108], mode)
	octal(b[108:116], 0)
	octal(b[116:124], 0)
	octal(b[124:136], size)
	octal(b[136:148], max(mtime, 0))
	b[156] = typeflag
	copy(b[257:265], "ustar\x0000")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	s := strconv.FormatInt(sum, 8)
	copy(b[148:155], append([]byte("000000"[:6-len(s)]), s...))
	b[154] = 0
	b[155] = ' '
	return b
}
