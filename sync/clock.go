package sync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// ChangeClock tells whether a checkout may have changed: its token moves
// whenever anything that decides the checkout's file set or content may
// have changed. The Client of package sync/watch is one.
type ChangeClock interface {
	// Clock returns the current token; an error means no token is known
	// (the checkout is listed as usual).
	Clock(ctx context.Context) (string, error)
}

// clockSuffix names the file, next to Options.CacheFile, that keeps the
// change clock's token of the last listing with what the listing found.
const (
	clockSuffix = ".clock"
	clockHeader = "crabbox-clock 1"
)

// clockState is what a listing made after the change clock said token
// found: the file set's fingerprint and size, and the warning about
// symlinks leading outside the checkout, if any. Key digests the inputs
// the token does not cover (the sync's options and excludes, git's
// configuration and excludes files outside the checkout).
type clockState struct {
	token, key   string
	fp           string
	files        int
	excludesFile string
	warning      string
}

// clockKey digests what decides a checkout's file set besides the files
// the change clock watches. It reports false when the listing cache could
// not be keyed either (see untrackedKeyInputs).
func clockKey(root, excludesFile string, opts Options, own []byte) (string, bool) {
	in := untrackedKeyInputs(root, excludesFile, own, time.Now(), true)
	if !in.ok || in.racy {
		return "", false
	}
	limits := DefaultLimits()
	if opts.Limits != nil {
		limits = *opts.Limits
	}
	h := sha256.New()
	h.Write(in.digest)
	fmt.Fprintf(h, "\x00%t %t %t %d %d", opts.RefuseOutsideLinks, opts.SkipSubmodules, opts.Force, limits.MaxFiles, limits.MaxBytes)
	return hex.EncodeToString(h.Sum(nil)), true
}

// readClock reads the clock file; ok is false when there is none or it is
// malformed.
func readClock(cacheFile string) (st clockState, ok bool) {
	data, err := os.ReadFile(cacheFile + clockSuffix)
	if err != nil {
		return st, false
	}
	head, rest, _ := bytes.Cut(data, []byte{'\n'})
	excludes, warning, _ := bytes.Cut(rest, []byte{'\n'})
	f := strings.Fields(string(head))
	if len(f) != 7 || f[0]+" "+f[1] != clockHeader || len(f[4]) != 64 {
		return st, false
	}
	st.files, err = strconv.Atoi(f[5])
	if err != nil || st.files < 0 || f[6] != strconv.Itoa(len(warning)) {
		return st, false
	}
	st.token, st.key, st.fp = f[2], f[3], f[4]
	st.excludesFile, st.warning = string(excludes), string(warning)
	return st, true
}

// writeClock saves st; the excludes file's name and the warning each
// follow on a line of their own.
func writeClock(cacheFile string, st clockState) error {
	data := fmt.Sprintf("%s %s %s %s %d %d\n%s\n%s", clockHeader, st.token, st.key, st.fp, st.files, len(st.warning), st.excludesFile, st.warning)
	return atomicfile.WriteCache(cacheFile+clockSuffix, []byte(data))
}
