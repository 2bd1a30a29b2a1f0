package sync

import "encoding/binary"

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

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.window())
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.bad {
		return 0
	}
	v, n := binary.Varint(d.window())
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
