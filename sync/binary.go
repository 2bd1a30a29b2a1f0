package sync

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// The local caches and the version 3 manifest store strings as their
// uvarint length and bytes, and numbers as uvarints or varints.

// appendString appends s as its uvarint length and bytes.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads what appendString and binary.Append(U)varint wrote, from a
// string whose substrings it returns. The first malformed or cut-short
// value sets bad; later reads return zero values.
type decoder struct {
	data string
	off  int
	bad  bool
}

func (d *decoder) more() bool { return !d.bad && d.off < len(d.data) }

func (d *decoder) window() []byte {
	return []byte(d.data[d.off:min(len(d.data), d.off+binary.MaxVarintLen64)])
}

func (d *decoder) uvarint() uint64 { return number(d, binary.Uvarint) }

func (d *decoder) varint() int64 { return number(d, binary.Varint) }

// number reads a number with decode, binary.Uvarint or binary.Varint.
func number[T uint64 | int64](d *decoder, decode func([]byte) (T, int)) T {
	if d.bad {
		return 0
	}
	v, n := decode(d.window())
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte() byte {
	if d.bad || d.off >= len(d.data) {
		d.bad = true
		return 0
	}
	d.off++
	return d.data[d.off-1]
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.data)-d.off) {
		d.bad = true
		return ""
	}
	s := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	return s
}

// count reads a number of items that each take a byte at least.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.data)-d.off) {
		d.bad = true
		return 0
	}
	return int(n)
}

// hexSums is the hex of SHA-256 sums laid end to end, in one string: the
// sums of a manifest or a cache of n files cost one allocation, not n.
type hexSums string

func newHexSums(raw []byte) hexSums {
	b := make([]byte, hex.EncodedLen(len(raw)))
	hex.Encode(b, raw)
	return hexSums(b)
}

// at is the k-th sum.
func (s hexSums) at(k int) string {
	const n = 2 * sha256.Size
	return string(s[k*n : (k+1)*n])
}

// digest is the hex SHA-256 of n records laid end to end; record appends
// the i-th to b.
func digest(n int, record func(b []byte, i int) []byte) string {
	h := sha256.New()
	buf := make([]byte, 0, 4096)
	for i := range n {
		if buf = record(buf, i); len(buf) >= 3072 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}
