package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// A checkpoint (see crabbox's Lease.Checkpoint) saves directories of a box
// as tar archives streamed over SSH, and puts them back, with the box's
// own tar: SaveTree and RestoreTree for a directory, SaveState and
// RestoreState for the sync state of a remote directory (its manifest and
// fingerprint, see StateDir), so that the first push into a restored copy
// sends only what changed since the checkpoint.

// ErrNoTree is the error of SaveTree for a directory the box does not
// have, and of SaveState for a remote directory nothing was synced into.
var ErrNoTree = errors.New("not on the box")

// exitNoTree is the exit status of the save scripts for ErrNoTree.
const exitNoTree = 3

// CheckBoxPath reports what makes dir no path SaveTree and RestoreTree
// take: a clean absolute path other than /, or "~/" and a clean relative
// path.
func CheckBoxPath(dir string) error {
	_, err := boxDir(dir)
	return err
}

// boxDir is the shell words that set $d to dir on the box: an absolute
// path, or "~/..." relative to the login's home.
func boxDir(dir string) (string, error) {
	if rel, ok := strings.CutPrefix(dir, "~/"); ok {
		if rel == "" || path.Clean(rel) != rel || path.IsAbs(rel) || strings.HasPrefix(rel, "../") || rel == ".." || strings.IndexByte(rel, 0) >= 0 {
			return "", fmt.Errorf("box path %q: want ~/ and a clean relative path", dir)
		}
		return `d="$HOME"/` + remote.Quote(rel), nil
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" || strings.IndexByte(dir, 0) >= 0 {
		return "", fmt.Errorf("box path %q: want a clean absolute path other than / or one starting with ~/", dir)
	}
	return "d=" + remote.Quote(dir), nil
}

// SaveTree writes a tar archive of the box's directory dir (entries
// relative to it) to w. dir is absolute or starts with "~/" (the login's
// home). A missing directory is ErrNoTree.
func SaveTree(ctx context.Context, client *ssh.Client, dir string, w io.Writer) error {
	set, err := boxDir(dir)
	if err != nil {
		return err
	}
	script := set + `; [ -d "$d" ] || exit ` + fmt.Sprint(exitNoTree) + `; cd "$d" && exec tar -cf - .`
	if err := boxScript(ctx, client, script, nil, w); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	return nil
}

// RestoreTree replaces the box's directory dir with the contents of the
// tar archive read from r. The archive is extracted beside dir first and
// swapped in only once it is whole, so a failed restore leaves dir as it
// was (and nothing beside it).
func RestoreTree(ctx context.Context, client *ssh.Client, dir string, r io.Reader) error {
	set, err := boxDir(dir)
	if err != nil {
		return err
	}
	script := set + `; p=$(dirname "$d") && mkdir -p "$p" && t=$(mktemp -d "$p/.crabbox-restore.XXXXXX") || exit 1
if ! tar -xf - -C "$t"; then rm -rf "$t"; exit 1; fi
rm -rf "$t.old" && { [ ! -e "$d" ] && [ ! -L "$d" ] || mv "$d" "$t.old"; } && mv "$t" "$d" && exec rm -rf "$t.old"`
	if err := boxScript(ctx, client, script, r, io.Discard); err != nil {
		return fmt.Errorf("restore %s: %w", dir, err)
	}
	return nil
}

// SaveState writes a tar archive of the sync state of the remote
// directory remoteDir (its manifest and fingerprint) to w. A remote
// directory nothing was synced into, or whose last push was cut short
// (it has no fingerprint), is ErrNoTree.
func SaveState(ctx context.Context, client *ssh.Client, remoteDir string, w io.Writer) error {
	if err := checkRemoteDir(remoteDir); err != nil {
		return err
	}
	script := "cd " + remote.Quote(StateDir(remoteDir)) + " 2>/dev/null && [ -f " + fingerprintFile + " ] && [ -f " + manifestFile + " ] || exit " + fmt.Sprint(exitNoTree) +
		"\nexec tar -cf - " + manifestFile + " " + fingerprintFile
	if err := boxScript(ctx, client, script, nil, w); err != nil {
		return fmt.Errorf("save the sync state of %s: %w", remoteDir, err)
	}
	return nil
}

// RestoreState installs the sync state SaveState wrote as that of
// remoteDir, replacing what the box had (a pending push's list too).
func RestoreState(ctx context.Context, client *ssh.Client, remoteDir string, r io.Reader) error {
	if err := checkRemoteDir(remoteDir); err != nil {
		return err
	}
	s := remote.Quote(StateDir(remoteDir))
	script := "mkdir -p " + s + " && cd " + s + " && rm -f " + strings.Join([]string{manifestFile, fingerprintFile, pendingFile, manifestTmp, fingerprintTmp}, " ") +
		" && exec tar -xf -"
	if err := boxScript(ctx, client, script, r, io.Discard); err != nil {
		return fmt.Errorf("restore the sync state of %s: %w", remoteDir, err)
	}
	return nil
}

// boxScript runs script on the box with stdin and stdout, ending it when
// ctx ends. Its exit status exitNoTree is ErrNoTree; another failure is
// an error holding the end of what it wrote to stderr.
func boxScript(ctx context.Context, client *ssh.Client, script string, stdin io.Reader, stdout io.Writer) error {
	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		return err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	var stderr tail
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, stdout, &stderr
	err = sess.Run(script)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var exit *ssh.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitStatus() == exitNoTree:
		return ErrNoTree
	case err != nil:
		return fmt.Errorf("%w%s", err, stderr.suffix())
	}
	return nil
}
