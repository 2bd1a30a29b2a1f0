package sync

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// The box keeps crabbox's state for RemoteDir outside it, in StateDir
// (PARENT/.crabbox/BASE for RemoteDir PARENT/BASE), so that commands
// never see it and a checkout may have a .crabbox of its own:
//
//   - manifest: what the last complete push synced (see encodeManifest).
//     Only paths on it are ever deleted.
//   - fingerprint: the fingerprint of that manifest.
//   - pending: present while a push changes the tree (deletions and
//     extraction): the paths that push writes or deletes (see
//     encodeChanges), empty until its archive starts. A later push trusts
//     none of them (nothing at all when the list is empty or cut short),
//     and deletes them unless they are in its file set. An earlier
//     crabbox wrote the whole manifest it meant to install instead; then
//     only the entries on which both agree are trusted.
//   - lock: a directory held by the push running now, holding "TOKEN PID".
//
// Earlier crabbox versions kept these files in RemoteDir/.crabbox; a push
// moves them out (see sessionScript).
//
// One file lives inside RemoteDir: Marker, holding the fingerprint of the
// manifest beside it. The state says what crabbox synced; the marker says
// that the directory holding it is the one it was synced into. A workdir
// deleted on the box (by a cleaner, a user, a full disk's cleanup) or
// replaced by another directory has no marker or another one, and a push
// that finds it so trusts nothing of the state: it sends the whole tree
// and deletes nothing, since nothing there is crabbox's. A push emptying
// the marker before it changes the tree and writes it back once the new
// manifest is in place, the marker also says, like the fingerprint, that
// no push was cut short since.
const (
	stateParent     = ".crabbox"
	manifestFile    = "manifest"
	fingerprintFile = "fingerprint"
	pendingFile     = "pending"
	manifestTmp     = manifestFile + ".tmp"
	fingerprintTmp  = fingerprintFile + ".tmp"
)

// Marker is the name of the file a push keeps at the top of the remote
// directory, holding the fingerprint of what it synced there (see
// StateDir). Commands see it; a checkout may not have a file or
// directory of that name at its top (Prepare refuses it).
const Marker = ".crabbox-synced"

// What sessionScript reports of the marker besides a fingerprint: no
// marker (or not a regular file), an empty one (a push was changing the
// tree), and one holding anything else.
const (
	markNone  = "-"
	markEmpty = "empty"
	markOther = "other"
)

// StateDir is the directory on the box where crabbox keeps what it knows
// of remoteDir: a sibling of it, PARENT/.crabbox/BASE. Release removes it
// with the rest of the lease's work root.
func StateDir(remoteDir string) string {
	parent, base := splitRemoteDir(remoteDir)
	return path.Join(parent, stateParent, base)
}

// splitRemoteDir splits a cleaned remote directory into its parent and
// base name (checkRemoteDir has refused those without either).
func splitRemoteDir(dir string) (parent, base string) {
	dir = path.Clean(dir)
	return path.Dir(dir), path.Base(dir)
}

// Lock timing on the box: a waiting push retries every 0.2 s (1 s where
// sleep takes only integers) up to defaultLockTries times. A lock whose holder
// process is gone is broken at once; one without an owner yet, after
// staleMinutes.
const defaultLockTries = 3000

const staleMinutes = 1

// sessionScript is the one command a push runs on the box, with the
// arguments PARENT BASE FINGERPRINT MODE TOKEN STALE TRIES KNOWN DF, for
// the remote directory PARENT/BASE. It creates that directory and the
// state directory (see StateDir), moves an earlier crabbox's state out of
// the remote directory, takes the lock, and either reports that the box
// already holds FINGERPRINT (MODE "quick") or prints the state:
// "crabbox-sync state FP MARK NAMES", with the box's fingerprint FP ("-"
// for none), what the remote directory's Marker holds (a fingerprint,
// markNone, markEmpty or markOther) and NAMES naming which of manifest and
// pending exist, then wc -c's report of their sizes and their contents,
// one after the other (two processes, not two per file; none without a
// file). When the box's fingerprint is KNOWN (the client has the manifest
// of that fingerprint), the manifest is not sent and NAMES ends with
// "known". Then it runs the steps the client sends on stdin, each as
// "LINES\n" and LINES lines of sh script, until stdin ends, in the remote
// directory, with $s the state directory and $crabbox_parent PARENT
// (absolute paths). A step may read stdin itself (tar). The lock is
// released when the script ends, however it ends. DF is the box's df
// command (a stand-in in tests), which failFunc asks for the free space
// when a write fails.
//
// An unchanged box is recognised before the lock, with shell builtins
// alone: a push that changes the tree removes the fingerprint, creates
// the pending file and empties the marker before it touches anything,
// and writes the new marker and fingerprint before it removes the pending
// file. So a fingerprint read as FINGERPRINT, followed by no pending file
// and a marker in the remote directory holding FINGERPRINT too, means the
// tree was FINGERPRINT's when the marker was read, as a check under the
// lock would have found; the lock only makes pushes wait for each other.
// A remote directory deleted or replaced since has no such marker.
//
// The script contains no backslash, so it survives any login shell's
// quoting; it reads steps with the read builtin, which never reads ahead,
// unlike sh -s, and which, unlike dd and wc, costs no process. A write
// that fails (a full disk above all) ends it through failFunc, and a
// mkdir of the lock that fails with no lock there (not another push's)
// ends it at the second try instead of waiting for a holder; a lock whose
// owner cannot be written is removed again, not left for the next push
// to wait a minute on.
const sessionScript = `crabbox_parent=$1 crabbox_base=$2 crabbox_fp=$3 crabbox_mode=$4 crabbox_token=$5 crabbox_stale=$6 crabbox_tries=$7 crabbox_known=${8:--} crabbox_df=${9:-df}
s=$crabbox_parent/.crabbox/$crabbox_base
if [ "$crabbox_mode" = quick ] && { read -r crabbox_have <"$s/fingerprint"; } 2>/dev/null &&
	[ "$crabbox_have" = "$crabbox_fp" ] && [ ! -e "$s/pending" ] &&
	{ read -r crabbox_have <"$crabbox_parent/$crabbox_base/` + Marker + `"; } 2>/dev/null && [ "$crabbox_have" = "$crabbox_fp" ]; then
	echo "crabbox-sync same"
	exit 0
fi
` + failFunc + `crabbox_dir=$crabbox_parent/$crabbox_base
crabbox_held=
crabbox_release() {
	if [ -n "$crabbox_held" ] && { read -r crabbox_o <"$s/lock/owner"; } 2>/dev/null && [ "$crabbox_o" = "$crabbox_token $$" ]; then
		rm -rf "$s/lock"
	fi
}
trap crabbox_release EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 141' PIPE
trap 'exit 143' TERM
cd -- "$crabbox_parent" 2>/dev/null || { mkdir -p -- "$crabbox_parent" && cd -- "$crabbox_parent"; } || crabbox_fail 1
crabbox_parent=$PWD
s=$PWD/.crabbox/$crabbox_base
[ -d "$crabbox_base" ] || mkdir -p -- "$crabbox_base" || crabbox_fail 1
[ -d "$s" ] || mkdir -p -- "$s" || crabbox_fail 1
cd -- "./$crabbox_base" || exit 1
crabbox_i=0 crabbox_nolock=0
until crabbox_e=$(mkdir -- "$s/lock" 2>&1); do
	if [ ! -e "$s/lock" ]; then
		crabbox_nolock=$((crabbox_nolock + 1))
		if [ "$crabbox_nolock" -gt 1 ]; then
			echo "$crabbox_e" >&2
			crabbox_fail 1 "$s"
		fi
		continue
	fi
	crabbox_nolock=0
	crabbox_owner=
	{ read -r crabbox_owner <"$s/lock/owner"; } 2>/dev/null
	if [ -n "$crabbox_owner" ]; then
		if ! kill -0 "${crabbox_owner#* }" 2>/dev/null; then
			rm -rf "$s/lock"
			continue
		fi
	elif [ -n "$(find "$s/lock" -prune -mmin "+$crabbox_stale" 2>/dev/null)" ]; then
		rm -rf "$s/lock"
		continue
	fi
	crabbox_i=$((crabbox_i + 1))
	if [ "$crabbox_i" -gt "$crabbox_tries" ]; then
		echo "another sync into $crabbox_dir holds $s/lock; remove it if none is running" >&2
		exit 75
	fi
	sleep 0.2 2>/dev/null || sleep 1
done
crabbox_held=1
echo "$crabbox_token $$" > "$s/lock/owner" || { rm -rf "$s/lock"; crabbox_fail 1 "$s"; }
if [ ! -e "$s/manifest" ] && [ ! -e "$s/pending" ] && [ -d .crabbox ] && [ ! -L .crabbox ] && [ ! -e .crabbox/lock ]; then
	crabbox_old=
	for crabbox_f in manifest pending; do
		{ read -r crabbox_l <".crabbox/$crabbox_f"; } 2>/dev/null || continue
		case $crabbox_l in crabbox-manifest' '*|crabbox-changes' '*) crabbox_old=1 ;; esac
	done
	if [ -n "$crabbox_old" ]; then
		for crabbox_f in manifest fingerprint pending; do
			if [ -f ".crabbox/$crabbox_f" ] && [ ! -L ".crabbox/$crabbox_f" ]; then
				mv -f -- ".crabbox/$crabbox_f" "$s/$crabbox_f" || crabbox_fail 1 "$s"
			fi
		done
		rm -f .crabbox/synced .crabbox/step .crabbox/manifest.tmp .crabbox/fingerprint.tmp
		rmdir .crabbox 2>/dev/null
	fi
fi
if [ "$crabbox_mode" = quick ] && [ ! -e "$s/pending" ] && { read -r crabbox_have <"$s/fingerprint"; } 2>/dev/null && [ "$crabbox_have" = "$crabbox_fp" ] &&
	{ read -r crabbox_have <./` + Marker + `; } 2>/dev/null && [ "$crabbox_have" = "$crabbox_fp" ]; then
	echo "crabbox-sync same"
	exit 0
fi
echo "crabbox-sync differ"
crabbox_have= crabbox_k=
{ read -r crabbox_have <"$s/fingerprint"; } 2>/dev/null
case $crabbox_have in
''|*[!0-9a-f]*) crabbox_have=- ;;
*) [ "${#crabbox_have}" -eq 64 ] || crabbox_have=- ;;
esac
crabbox_mark=` + markNone + `
if [ -f ./` + Marker + ` ] && [ ! -L ./` + Marker + ` ]; then
	crabbox_mark=
	{ read -r crabbox_mark <./` + Marker + `; } 2>/dev/null
	case $crabbox_mark in
	'') crabbox_mark=` + markEmpty + ` ;;
	*[!0-9a-f]*) crabbox_mark=` + markOther + ` ;;
	*) [ "${#crabbox_mark}" -eq 64 ] || crabbox_mark=` + markOther + ` ;;
	esac
fi
set --
for crabbox_f in manifest pending; do
	[ -f "$s/$crabbox_f" ] || continue
	if [ "$crabbox_f" = manifest ] && [ "$crabbox_known" != - ] && [ "$crabbox_have" = "$crabbox_known" ]; then
		crabbox_k=known
		continue
	fi
	set -- "$@" "$crabbox_f"
done
echo "crabbox-sync state $crabbox_have $crabbox_mark $* $crabbox_k"
if [ $# -gt 0 ]; then
	(cd -- "$s" && wc -c -- "$@" && cat -- "$@") || exit 1
fi
crabbox_nl='
'
while IFS= read -r crabbox_n; do
	case $crabbox_n in
	''|*[!0-9]*) echo "crabbox: malformed step" >&2; exit 1 ;;
	esac
	crabbox_i=0
	while [ "$crabbox_i" -lt "$crabbox_n" ] && IFS= read -r crabbox_l; do
		printf '%s%s' "$crabbox_l" "$crabbox_nl" || crabbox_fail 1 "$s"
		crabbox_i=$((crabbox_i + 1))
	done >"$s/lock/step" || crabbox_fail 1 "$s"
	[ "$crabbox_i" -eq "$crabbox_n" ] || exit 1
	. "$s/lock/step"
done
exit 0
`

// failFunc defines crabbox_fail STATUS [DIR], which ends a script on the
// box after a failure: it prints freeMarker to stderr with the kilobytes
// available to unprivileged users on DIR's file system (the current
// directory's by default) and DIR, so that a full disk is reported as one
// (see diskFull), and exits with STATUS. It asks $crabbox_df (df when
// unset) for the free space.
const failFunc = `crabbox_fail() {
	crabbox_st=$1 crabbox_at=${2:-$PWD}
	"${crabbox_df:-df}" -kP "$crabbox_at" 2>/dev/null | { read -r crabbox_l && read -r crabbox_l crabbox_l crabbox_l crabbox_free crabbox_l &&
		echo "` + freeMarker + ` $crabbox_free $crabbox_at" >&2; }
	exit "$crabbox_st"
}
`

// sessionCommand is the command line running sessionScript.
func sessionCommand(remoteDir, fp, mode, token string, lockTries int, known, df string) string {
	parent, base := splitRemoteDir(remoteDir)
	if !path.IsAbs(parent) && parent != "." && parent != ".." && !strings.HasPrefix(parent, "../") {
		parent = "./" + parent // not searched in CDPATH
	}
	return remote.CommandLine([]string{"sh", "-c", sessionScript, scriptName,
		parent, base, fp, mode, token, strconv.Itoa(staleMinutes), strconv.Itoa(lockTries), cmp.Or(known, "-"), cmp.Or(df, "df")})
}

// scriptName is the name ($0) of crabbox's scripts on the box, with which
// the box's shell starts its own messages (see boxMessage).
const scriptName = "crabbox-sync"

// step frames a script as one step for sessionScript: its number of
// lines, then its lines.
func step(script string) []byte {
	if !strings.HasSuffix(script, "\n") {
		script += "\n"
	}
	return []byte(strconv.Itoa(strings.Count(script, "\n")) + "\n" + script)
}

// manifestStep prints the box's manifest as "crabbox-sync manifest SIZE"
// and SIZE bytes, or "crabbox-sync manifest -".
const manifestStep = `if [ -f "$s/manifest" ]; then
	echo "crabbox-sync manifest $(($(wc -c < "$s/manifest")))" && cat -- "$s/manifest" || exit 1
else
	echo "crabbox-sync manifest -"
fi
`

// hashedMarker ends the output of a hash step.
const hashedMarker = "crabbox-sync hashed"

// hashBatch bounds the arguments of one command on the box.
const hashBatch = 256

// hashStep prints the SHA-256 of the given paths that are regular files
// (not symlinks) on the box, in sha256sum's format, then hashedMarker.
func hashStep(paths []string) string {
	var b strings.Builder
	b.WriteString(`crabbox_hash() {
	if command -v sha256sum >/dev/null 2>&1; then sha256sum -- "$@"; else shasum -a 256 -- "$@"; fi
}
`)
	for chunk := range slices.Chunk(paths, hashBatch) {
		b.WriteString("set --\n")
		for _, p := range chunk {
			q := remote.Quote(p)
			fmt.Fprintf(&b, "[ -f %s ] && [ ! -L %s ] && set -- \"$@\" %s\n", q, q, q)
		}
		b.WriteString("[ $# -eq 0 ] || crabbox_hash \"$@\" 2>/dev/null\n")
	}
	b.WriteString("echo '" + hashedMarker + "'\n")
	return b.String()
}

// parseHashes parses sha256sum (or shasum -a 256) output into a map from
// path to hash. Names holding a backslash or a newline are escaped, the
// line then starting with a backslash.
func parseHashes(lines []string) map[string]string {
	out := make(map[string]string, len(lines))
	for _, l := range lines {
		escaped := strings.HasPrefix(l, `\`)
		if escaped {
			l = l[1:]
		}
		if len(l) < 66 || (l[64] != ' ') || (l[65] != ' ' && l[65] != '*') {
			continue
		}
		sum, name := l[:64], l[66:]
		if escaped {
			name = unescapeName(name)
		}
		out[name] = strings.ToLower(sum)
	}
	return out
}

func unescapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// transferStep marks the tree as changing, deletes the stale paths,
// extracts the archive that follows on stdin with tar (the box's tar, a
// stand-in in tests) and, only if that succeeded, installs the new manifest
// and fingerprint (the archive's last entries).
//
// The box's fingerprint goes first (with the pending file in place,
// either tells a reader without the lock that the tree is changing) and
// comes back last, written by the shell: a reader that catches it half
// written sees a fingerprint that matches nothing while the pending file
// is still there.
//
// It empties the remote directory's Marker with the fingerprint, and
// writes the new fingerprint into both once the new manifest is in place:
// a marker holding the fingerprint of the manifest beside it tells a later
// push that this directory is the one that manifest describes (see
// StateDir). A marker that is a symlink is removed, never written through.
//
// A failure there ends it through failFunc, which reports the free space,
// so that a full disk is reported as one (see diskFull).
//
// With release (the session's step, which holds the lock), the lock goes
// with the pending file, in the same process. Directories that held a
// deleted path are removed when left empty, except those that hold a path
// of the new file set (held), which the archive fills again.
//
// With pace, the step first prints paceMarker and "dots" when the box's tar
// is GNU tar, which then prints a dot before every paceRecords records it
// reads (see pacer), or "none" otherwise.
func transferStep(del []string, tar string, release, pace bool, held func(dir string) bool) string {
	var b strings.Builder
	b.WriteString(failFunc)
	// An empty fingerprint is none. The leftovers of an interrupted push
	// are removed, but costing a process only when there are any.
	b.WriteString(`: > "$s/pending" && : > "$s/fingerprint" || crabbox_fail 1 "$s"
if [ -L ./` + Marker + ` ]; then rm -f -- ./` + Marker + ` || crabbox_fail 1; fi
: > ./` + Marker + ` || crabbox_fail 1
if [ -e "$s/manifest.tmp" ] || [ -e "$s/fingerprint.tmp" ] || [ -L "$s/manifest.tmp" ] || [ -L "$s/fingerprint.tmp" ]; then
	rm -f -- "$s/manifest.tmp" "$s/fingerprint.tmp" || exit 1
fi
`)
	if len(del) > 0 {
		b.WriteString(deleteSection(del, held))
	}
	done := `rm -f -- "$s/pending" "$s/fingerprint.tmp"`
	if release {
		// A lock that cannot go (the step being read is in it, which
		// NFS keeps as a .nfs file while open) is the exit trap's
		// again, as before: only the pending file decides.
		done = `{ rm -rf -- "$s/pending" "$s/fingerprint.tmp" "$s/lock"; [ ! -e "$s/pending" ] && [ ! -e "$s/fingerprint.tmp" ]; } && { [ -e "$s/lock" ] || crabbox_held=; }`
	}
	// The archive's paths start at the parent directory (see
	// archive), so that it reaches the state directory too. GNU tar
	// reads its input in records of 20 blocks (10 KiB) and writes each
	// file in pieces cut at those records; records of 128 blocks
	// (64 KiB, a full pipe) take it 30% fewer system calls to extract a
	// checkout of small files. Run as root, it also gives each file the
	// archive's owner, root (archive names no other), and then its mode
	// again: two more calls a file for the owner root has anyway. Only
	// GNU tar reads TAR_OPTIONS; the box's own come after, so they win.
	extract := "exec " + remote.Quote(tar) + " -xf -"
	if pace {
		// The pace options come after TAR_OPTIONS, so they win: a dot
		// is then always paceRecords records.
		b.WriteString(`crabbox_pace=none
case $(` + remote.Quote(tar) + ` --version 2>/dev/null) in 'tar (GNU tar) '*) crabbox_pace=dots ;; esac
echo "` + paceMarker + `$crabbox_pace"
`)
		// GNU tar prints a dot before every paceRecords records of
		// paceRecord bytes it reads.
		paced := fmt.Sprintf("%s --blocking-factor=%d --checkpoint=%d --checkpoint-action=dot", extract, paceRecord/512, paceRecords)
		extract = `if [ "$crabbox_pace" = dots ]; then ` + paced + "; else " + extract + "; fi"
	}
	b.WriteString("if (cd -- \"$crabbox_parent\" && TAR_OPTIONS=\"" + boxTarOptions + "${TAR_OPTIONS:+ $TAR_OPTIONS}\" && export TAR_OPTIONS && " + extract + `); then :; else
	crabbox_st=$?
	rm -f -- "$s/manifest.tmp" "$s/fingerprint.tmp"
	crabbox_fail "$crabbox_st"
fi
read -r crabbox_f <"$s/fingerprint.tmp" && mv -f -- "$s/manifest.tmp" "$s/manifest" &&
	echo "$crabbox_f" >./` + Marker + ` && echo "$crabbox_f" >"$s/fingerprint" && ` + done + ` ||
	crabbox_fail $?
exit 0
`)
	return b.String()
}

// boxTarOptions are the options transferStep gives the box's tar through
// TAR_OPTIONS.
const boxTarOptions = "--blocking-factor=128 --no-same-owner"

// freeMarker starts the line of a failed transfer step giving the free
// space and the directory on the box: "crabbox-sync free KB DIR".
const freeMarker = "crabbox-sync free"

// noSpace is the C library's message for ENOSPC, which tar, sh and mv
// print on a full disk.
const noSpace = "No space left on device"

// ioError is how dash (Debian's and Ubuntu's sh) reports any write of a
// builtin that failed, ENOSPC included: "echo: I/O error".
const ioError = ": I/O error"

// nearlyFull is the free space below which a write that failed with
// ioError is taken for a full disk.
const nearlyFull = 1 << 20

// diskFull reads the stderr of a failed push: whether the box reported a
// full disk and, when failFunc said, the directory and its free space in
// bytes (known false when it did not). A disk is full when the box said
// "No space left on device", or when a write failed with dash's "I/O
// error" and the directory has less than nearlyFull free.
func diskFull(stderr string) (dir string, free int64, known, full bool) {
	for line := range strings.Lines(stderr) {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), freeMarker+" ")
		if !ok {
			continue
		}
		kb, d, ok := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(kb, 10, 64)
		if !ok || err != nil || n < 0 || d == "" {
			continue
		}
		dir, free, known = d, n*1024, true
	}
	full = strings.Contains(stderr, noSpace) || (known && free < nearlyFull && strings.Contains(stderr, ioError))
	if !full {
		return "", 0, false, false
	}
	return dir, free, known, true
}

// diskFullError describes a full disk on the box (what, "box" or
// "sandbox"), from what diskFull found (at, free, known), for the remote
// directory dir.
func diskFullError(what, dir, at string, free int64, known bool) error {
	if known {
		return fmt.Errorf("the %s's disk is full (%s free in %s); make room there and sync again", what, FormatBytes(free), at)
	}
	return fmt.Errorf("the %s's disk is full (no space left on device for %s); make room there and sync again", what, dir)
}

// withoutFree removes the freeMarker lines from stderr.
func withoutFree(stderr string) string {
	if !strings.Contains(stderr, freeMarker) {
		return stderr
	}
	var b strings.Builder
	for line := range strings.Lines(stderr) {
		if !strings.HasPrefix(line, freeMarker+" ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// boxMessage is the stderr of crabbox's scripts on the box as a reader
// wants it: without the freeMarker lines, and without the place in the
// script that shells put first ("crabbox-sync: 47: " from dash,
// "crabbox-sync: line 47: " from bash and busybox, "sh: 3: " from a
// delegated sandbox's sh -c), which says nothing to a user. dash's "echo:
// echo: I/O error" loses its repeated name.
func boxMessage(stderr string) string {
	var b strings.Builder
	for line := range strings.Lines(withoutFree(stderr)) {
		line = withoutPlace(line)
		if name, rest, ok := strings.Cut(line, ": "); ok && name != "" && !strings.Contains(name, " ") && strings.HasPrefix(rest, name+": ") {
			line = rest
		}
		b.WriteString(line)
	}
	return b.String()
}

// withoutPlace removes a shell's "NAME: [line ]N: " from the start of a
// line of stderr, where NAME is scriptName or sh.
func withoutPlace(line string) string {
	for _, name := range []string{scriptName, "sh"} {
		rest, ok := strings.CutPrefix(line, name+": ")
		if !ok {
			continue
		}
		rest = strings.TrimPrefix(rest, "line ")
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i > 0 && strings.HasPrefix(rest[i:], ": ") {
			return rest[i+2:]
		}
	}
	return line
}

// deleteBatch bounds the arguments of one rm or rmdir on the box.
const deleteBatch = 256

// deleteSection removes the stale paths (relative to the current
// directory), then the directories that held them if they are now empty,
// but those held says the new file set fills again (nil: none), with one
// rm and one rmdir per batch. Nothing is removed through a symlink: every
// parent of a path must be a real directory.
func deleteSection(paths []string, held func(dir string) bool) string {
	var b strings.Builder
	b.WriteString(`crabbox_safe() {
	crabbox_p=$1 crabbox_d=.
	while :; do
		case $crabbox_p in
		*/*) crabbox_d=$crabbox_d/${crabbox_p%%/*} crabbox_p=${crabbox_p#*/} ;;
		*) return 0 ;;
		esac
		[ -d "$crabbox_d" ] && [ ! -L "$crabbox_d" ] || return 1
	done
}
`)
	batch := func(cmd string, items []string) {
		for chunk := range slices.Chunk(items, deleteBatch) {
			b.WriteString("set --\n")
			for _, p := range chunk {
				q := remote.Quote(p)
				fmt.Fprintf(&b, "crabbox_safe %s && set -- \"$@\" %s\n", q, q)
			}
			fmt.Fprintf(&b, "[ $# -eq 0 ] || %s -- \"$@\" 2>/dev/null\n", cmd)
		}
	}
	batch("rm -f", paths)
	dirs := parentDirs(paths)
	if held != nil {
		dirs = slices.DeleteFunc(dirs, held)
	}
	batch("rmdir", dirs)
	return b.String()
}

// parentDirs returns the directories holding paths, deepest first, so that
// rmdir empties them bottom up.
func parentDirs(paths []string) []string {
	set := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			set[d] = true
		}
	}
	dirs := make([]string, 0, len(set))
	for d := range set {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		if n := strings.Count(b, "/") - strings.Count(a, "/"); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	return dirs
}
