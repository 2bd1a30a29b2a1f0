package run

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// StopResult is what StopAll found and did on the box.
type StopResult struct {
	// Stopped counts the runs of the lease whose process group was ended
	// (or had ended by itself while StopAll looked).
	Stopped int
	// Failed counts the runs whose process group was still alive after
	// SIGKILL.
	Failed int
}

// StopAll ends every command running on the box that was started with
// Command.Lease set to lease: each one's process group gets SIGTERM, then
// SIGKILL after grace (zero means DefaultKillGrace), as when a run is
// cancelled. Commands of other leases, and untagged ones, are left alone,
// so a box that serves several leases (a shared SSH host) can be stopped a
// lease at a time. The runs whose commands were ended report the status
// of their death (143 for SIGTERM).
//
// A command being started as StopAll looks is waited for (a few seconds)
// and ended too; one started after StopAll is not. It returns once the
// groups are gone and their runs' wrappers have exited (or after a bounded
// wait for them), or with ctx's error when ctx ends first.
func StopAll(ctx context.Context, client *ssh.Client, lease string, grace time.Duration) (StopResult, error) {
	if lease == "" {
		return StopResult{}, errors.New("stop the commands of a lease: no lease tag given")
	}
	if err := checkLeaseTag(lease); err != nil {
		return StopResult{}, fmt.Errorf("stop the commands of lease %q: %w", lease, err)
	}
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	var res StopResult
	err := boxScript(ctx, client, stopAllScript(lease, grace), nil, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case "0", "3": // ended, or gone by itself meanwhile
				res.Stopped++
			default:
				res.Failed++
			}
		}
		return sc.Err()
	})
	if err != nil {
		return res, fmt.Errorf("stop the commands of lease %s on the box: %w", lease, err)
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("stop the commands of lease %s on the box: %d of %d process groups survived SIGKILL", lease, res.Failed, res.Failed+res.Stopped)
	}
	return res, nil
}

// wrapperExitWait bounds how long StopAll waits for the wrapper of a run
// whose command it ended to exit.
const wrapperExitWait = 2 * time.Second

// stopAllScript kills, in parallel, the process groups of the run
// directories whose lease file holds lease, printing each kill's status
// on a line of its own (crabbox_kill's: 0 ended, 1 survived, 3 not
// started or already ended). Run directories of other users cannot be
// read and are skipped.
func stopAllScript(lease string, grace time.Duration) string {
	var b strings.Builder
	b.WriteString(killFuncs)
	b.WriteString(`for crabbox_r in "${TMPDIR:-/tmp}"/crabbox-run-*; do
	read -r crabbox_t 2>/dev/null <"$crabbox_r/lease" || continue
	[ "$crabbox_t" = ` + lease + ` ] || continue
`)
	fmt.Fprintf(&b, "\t{ crabbox_kill \"$crabbox_r\" %d %d >/dev/null 2>&1; echo $?\n", steps(publishWait), steps(grace))
	// The run's wrapper removes its directory just before it exits with
	// the command's status: waiting for that (boundedly), and a moment
	// more, lets the run learn how its command ended before the box goes.
	// A directory still there belongs to a wrapper that died before its
	// command (which StopAll just ended): it goes too.
	fmt.Fprintf(&b, "\tcrabbox_i=0; while [ -d \"$crabbox_r\" ] && [ \"$crabbox_i\" -lt %d ]; do crabbox_i=$((crabbox_i+1)); crabbox_nap; done\n\t[ \"$crabbox_i\" -gt 0 ] && crabbox_nap; rm -rf -- \"$crabbox_r\"; } &\n", steps(wrapperExitWait))
	b.WriteString("done\nwait\n")
	return b.String()
}

// checkLeaseTag accepts an empty tag or one made of letters, digits, '.',
// '_' and '-', which the wrapper writes and StopAll compares unquoted.
func checkLeaseTag(tag string) error {
	if len(tag) > 128 {
		return fmt.Errorf("lease tag %.20q... is longer than 128 bytes", tag)
	}
	for _, r := range tag {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("lease tag %q holds %q; use letters, digits, '.', '_' and '-'", tag, r)
		}
	}
	return nil
}
