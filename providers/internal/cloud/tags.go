package cloud

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// TagCodec writes labels as the plain string tags of clouds that have no
// key-value labels (DigitalOcean, Linode, ...) and reads them back.
//
// A label key=value becomes the tag "key:value", with every '.' written
// as '_' (DigitalOcean's tags allow only letters, digits, '_', '-' and
// ':'). A tag longer than MaxLen is split into numbered parts,
// "key:1:...", "key:2:...", which Labels joins again. The ownership labels
// have no '.' and survive the round trip exactly; a caller's label with a
// '.' comes back with '_'.
type TagCodec struct {
	// MaxLen is the longest tag the cloud accepts.
	MaxLen int
}

// Tags returns labels as tags, sorted. It fails when a key is too long to
// fit a tag with a part of its value.
func (c TagCodec) Tags(labels map[string]string) ([]string, error) {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		key, value := tagText(k), tagText(labels[k])
		if tag := key + ":" + value; len(tag) <= c.MaxLen {
			out = append(out, tag)
			continue
		}
		// "key:N:" and at least one character of the value.
		room := c.MaxLen - len(key) - 2 - len(strconv.Itoa(len(value)))
		if room < 1 {
			return nil, fmt.Errorf("label %q does not fit a tag of at most %d characters", k, c.MaxLen)
		}
		for i := 0; len(value) > 0; i++ {
			n := min(room, len(value))
			out = append(out, key+":"+strconv.Itoa(i+1)+":"+value[:n])
			value = value[n:]
		}
	}
	return out, nil
}

// Tag is the single tag of one label, for a cloud's tag filter; the label
// must fit one tag.
func (c TagCodec) Tag(key, value string) string { return tagText(key) + ":" + tagText(value) }

// Labels reads the labels back from tags. Tags that are not of either
// form (other tools' tags), and split labels with a part missing, are
// left out.
func (c TagCodec) Labels(tags []string) map[string]string {
	out := map[string]string{}
	parts := map[string]map[int]string{}
	for _, tag := range tags {
		f := strings.Split(tag, ":")
		switch {
		case len(f) == 2 && f[0] != "":
			out[f[0]] = f[1]
		case len(f) == 3 && f[0] != "":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 || f[2] == "" {
				continue
			}
			if parts[f[0]] == nil {
				parts[f[0]] = map[int]string{}
			}
			parts[f[0]][n] = f[2]
		}
	}
	for k, p := range parts {
		if _, ok := out[k]; ok {
			continue
		}
		var b strings.Builder
		for i := 1; i <= len(p); i++ {
			s, ok := p[i]
			if !ok {
				b.Reset()
				break
			}
			b.WriteString(s)
		}
		if b.Len() > 0 {
			out[k] = b.String()
		}
	}
	return out
}

// tagText is a label key or value with '.' written as '_'.
func tagText(s string) string { return strings.ReplaceAll(s, ".", "_") }
