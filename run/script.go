package run

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// The remote side of a run is a wrapper script sent on the session's stdin
// to `sh -s`, so that neither the command nor its environment appears in any
// process's arguments. The wrapper
//
//   - evaluates the precondition, if any, and stops when it fails,
//   - changes into the working directory,
//   - creates a private run directory ${TMPDIR:-/tmp}/crabbox-run-<nonce>,
//     holding the run's lease tag, if any, in <rundir>/lease (see StopAll),
//   - reports on stdout, as its first line, "<marker> ok" or
//     "<marker> <failure>", so the client can tell a setup failure from the
//     command's own exit status,
//   - starts a watchdog that kills the command when stdin reaches EOF (the
//     client closed the session or the connection dropped),
//   - runs the command in a process group of its own: with setsid(1) when the
//     box has it (util-linux, busybox), otherwise as a job of a
//     job-controlling shell (set -m without a terminal: bash can, dash and
//     busybox ash cannot), otherwise as a plain background child, which
//     only the command's main process can be signalled through and which
//     starts with SIGINT and SIGQUIT ignored,
//   - waits for it, kills what the command left running in its group,
//     removes the run directory and exits with the command's status.
//
// The command runs in a small trampoline shell that records its process
// group ("g PGID", or "p PID" when it did not get a group of its own) in
// <rundir>/pgid, then creates <rundir>/ready, then evals the command. The
// cancel script, run in a second session, reads that file to kill the group.

const (
	// napStep is the polling interval of the remote loops.
	napStep = 100 * time.Millisecond
	// publishWait bounds how long a killer waits for a starting command to
	// record its process group.
	publishWait = 5 * time.Second
)

// killFuncs defines crabbox_kill RUNDIR PUBLISH_STEPS GRACE_STEPS: wait up
// to PUBLISH_STEPS for the command to record its group (if the run directory
// still exists), send SIGTERM to the group, wait up to GRACE_STEPS for it to
// go away, then SIGKILL it and wait a little more. It returns 3 when no
// group was recorded (the command has not started, or has finished).
//
// kill -0 succeeds for zombies, and orphaned members of the group stay
// zombies until init reaps them, which some container inits do late or
// never; where /proc exists, crabbox_alive looks past them.
const killFuncs = `crabbox_nap() { sleep 0.1 2>/dev/null || sleep 1; }
crabbox_alive() {
	kill -0 "$1" 2>/dev/null || return 1
	case $1 in -*) ;; *) return 0 ;; esac
	[ -r /proc/self/stat ] || return 0
	crabbox_g=${1#-}
	for crabbox_f in /proc/[0-9]*/stat; do
		read -r crabbox_l 2>/dev/null <"$crabbox_f" || continue
		set -- ${crabbox_l##*') '}
		[ "$1" != Z ] && [ "$3" = "$crabbox_g" ] && return 0
	done
	return 1
}
crabbox_kill() {
	crabbox_i=0
	while [ ! -f "$1/ready" ]; do
		[ -d "$1" ] && [ "$crabbox_i" -lt "$2" ] || return 3
		crabbox_i=$((crabbox_i+1)); crabbox_nap
	done
	read -r crabbox_k crabbox_p <"$1/pgid" || return 0
	case $crabbox_k in g) crabbox_t=-$crabbox_p ;; *) crabbox_t=$crabbox_p ;; esac
	crabbox_alive "$crabbox_t" || return 0
	kill -TERM "$crabbox_t" 2>/dev/null
	crabbox_i=0
	while crabbox_alive "$crabbox_t"; do
		[ "$crabbox_i" -eq "$3" ] && kill -KILL "$crabbox_t" 2>/dev/null
		[ "$crabbox_i" -gt $(($3+50)) ] && return 1
		crabbox_i=$((crabbox_i+1)); crabbox_nap
	done
	return 0
}
`

// trampoline runs the command; it is the first process of the command's
// process group. Its text is fixed, so nothing secret is in its arguments.
// When the run forwards stdin, the trampoline opens the run's stdin FIFO
// as the command's stdin only after it has published its group: a command
// blocked in that open can always be killed.
const trampoline = `crabbox_d=$CRABBOX_RUN_DIR crabbox_c=$CRABBOX_RUN_CMD
unset CRABBOX_RUN_DIR CRABBOX_RUN_CMD
if kill -0 -$$ 2>/dev/null; then crabbox_k=g; else crabbox_k=p; fi
echo "$crabbox_k $$" >"$crabbox_d/pgid" && : >"$crabbox_d/ready" || exit 125
if [ -p "$crabbox_d/stdin" ]; then exec <"$crabbox_d/stdin"; fi
unset crabbox_d crabbox_k
eval "unset crabbox_c
$crabbox_c"`

// Setup failures the wrapper reports instead of "ok".
const (
	statusOK       = "ok"
	statusNoDir    = "nodir"
	statusNotDir   = "notdir"
	statusNoAccess = "noaccess"
	statusRunDir   = "rundir"
	// statusStdin reports that the stdin FIFO could not be made.
	statusStdin = "stdin"
	// statusPrecondition reports a failed Request.Precondition.
	statusPrecondition = "precondition"
)

func runDir(nonce string) string {
	return `"${TMPDIR:-/tmp}/crabbox-run-` + nonce + `"`
}

func steps(d time.Duration) int {
	return max(1, int((d+napStep-1)/napStep))
}

// wrapper is what a run's wrapper script is made of.
type wrapper struct {
	nonce   string // names the run directory (see runDir)
	marker  string // starts the status line
	command string // the shell command line to run
	// dir, precondition, env and lease are Command's Dir, Precondition,
	// Env and Lease.
	dir, precondition string
	env               map[string]string
	lease             string
	grace             time.Duration // from SIGTERM to SIGKILL
	stdin             bool          // the command reads a FIFO (see stdinScript)
}

// script returns the script that runs w.command. The whole script is one
// brace group, so sh has read all of it before running any of it and
// stdin is free for the watchdog. With stdin, the run directory holds a
// FIFO, made before the "ok" line, that the command reads as its stdin
// and a second session writes (see stdinScript).
func (w wrapper) script() string {
	var b strings.Builder
	b.WriteString("{\n")
	// The wrapper's own stderr is /dev/null and the command's is fd 4: a
	// shell reports a child that died by a signal ("Terminated") on its
	// stderr, which the command's output must not carry. The command is
	// started in a subshell that takes the redirections and execs it,
	// because dash applies a simple command's redirections in the shell
	// itself (it vforks) and would report through them.
	b.WriteString("unset CDPATH\nexec 3<&0 4>&2 2>/dev/null\n")
	b.WriteString(killFuncs)
	fmt.Fprintf(&b, "crabbox_fail() { printf '%%s %%s\\n' %s \"$1\"; exit 125; }\n", remote.Quote(w.marker))
	if w.precondition != "" {
		// eval: the condition is parsed only now, so a syntax error in
		// it fails the condition instead of the whole wrapper.
		fmt.Fprintf(&b, "if ! (eval %s) </dev/null >/dev/null 2>&1; then crabbox_fail %s; fi\n", remote.Quote(w.precondition), statusPrecondition)
	}
	if w.dir != "" {
		q := remote.Quote(w.dir)
		fmt.Fprintf(&b, "if ! cd -- %s 2>/dev/null; then\n", q)
		fmt.Fprintf(&b, "\tif [ ! -e %s ]; then crabbox_fail %s; elif [ ! -d %s ]; then crabbox_fail %s; else crabbox_fail %s; fi\nfi\n",
			q, statusNoDir, q, statusNotDir, statusNoAccess)
	}
	fmt.Fprintf(&b, "crabbox_d=%s\n", runDir(w.nonce))
	fmt.Fprintf(&b, "mkdir -m 700 -- \"$crabbox_d\" 2>/dev/null || crabbox_fail %s\n", statusRunDir)
	if w.lease != "" { // StopAll finds the lease's runs by it (stop.go)
		fmt.Fprintf(&b, "echo %s >\"$crabbox_d/lease\" || { rm -rf -- \"$crabbox_d\"; crabbox_fail %s; }\n", w.lease, statusRunDir)
	}
	if w.stdin {
		fmt.Fprintf(&b, "mkfifo -m 600 -- \"$crabbox_d/stdin\" || { rm -rf -- \"$crabbox_d\"; crabbox_fail %s; }\n", statusStdin)
	}
	fmt.Fprintf(&b, "{ while read -r crabbox_l; do :; done; crabbox_kill \"$crabbox_d\" %d %d; } 0<&3 3<&- 4>&- >/dev/null 2>&1 &\n",
		steps(publishWait), steps(w.grace))
	b.WriteString("crabbox_w=$!\n")
	fmt.Fprintf(&b, "printf '%%s %%s\\n' %s %s\n", remote.Quote(w.marker), statusOK)

	// The command's environment: prefix assignments reach the command
	// without touching the wrapper's own variables.
	var assign strings.Builder
	names := make([]string, 0, len(w.env))
	for name := range w.env {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&assign, "%s=%s ", name, remote.Quote(w.env[name]))
	}
	fmt.Fprintf(&assign, "CRABBOX_RUN_DIR=\"$crabbox_d\" CRABBOX_RUN_CMD=%s", remote.Quote(w.command))
	tramp := remote.Quote(trampoline)

	b.WriteString("if command -v setsid >/dev/null 2>&1; then\n")
	fmt.Fprintf(&b, "\t(%s setsid sh -c %s </dev/null 2>&4 3<&- 4>&-)\n", assign.String(), tramp)
	b.WriteString("\tcrabbox_s=$?\nelse\n")
	b.WriteString("\tset -m 2>/dev/null\n")
	fmt.Fprintf(&b, "\t(%s sh -c %s </dev/null 2>&4 3<&- 4>&-) &\n", assign.String(), tramp)
	b.WriteString("\twait $!\n\tcrabbox_s=$?\n\tset +m\nfi\n")
	fmt.Fprintf(&b, "crabbox_kill \"$crabbox_d\" 0 %d >/dev/null 2>&1\n", steps(w.grace))
	b.WriteString("kill \"$crabbox_w\"; wait \"$crabbox_w\"\n")
	if w.stdin {
		b.WriteString(releaseStdinWriter)
	}
	b.WriteString("rm -rf -- \"$crabbox_d\"\n")
	b.WriteString("exit \"$crabbox_s\"\n")
	b.WriteString("}\n")
	return b.String()
}

// cancelScript kills the process group of the run identified by nonce.
func cancelScript(nonce string, grace time.Duration) string {
	return killFuncs + fmt.Sprintf("crabbox_kill %s %d %d\nexit $?\n", runDir(nonce), steps(publishWait), steps(grace))
}
