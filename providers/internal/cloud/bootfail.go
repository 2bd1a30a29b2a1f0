package cloud

import (
	"errors"
	"strings"
)

// failedPrefix begins the first line of FailedMarker, which a failed
// bootstrap's sshd sends as its banner.
const failedPrefix = "crabbox-bootstrap-failed: "

// Bounds of what a BootstrapError quotes from a box's banner.
const (
	maxFailedStep   = 200
	maxFailedLines  = 10
	maxFailedOutput = 1000
)

// BootstrapError is a box whose bootstrap failed: its sshd answers with
// the client's host key and a banner naming the failed step. WaitForSSH
// returns it as soon as it sees that banner (errors.As finds it), instead
// of waiting out its timeout for a box that will never be ready.
type BootstrapError struct {
	// Host is the box's address.
	Host string
	// Step is the bootstrap step that failed, with its exit status.
	Step string
	// Output is the end of the bootstrap's output (at most 10 lines),
	// printable ASCII only; may be empty.
	Output string
}

// ErrBootstrapFailed matches every *BootstrapError with errors.Is.
var ErrBootstrapFailed = errors.New("box bootstrap failed")

// Is makes errors.Is(err, ErrBootstrapFailed) true.
func (e *BootstrapError) Is(target error) bool { return target == ErrBootstrapFailed }

func (e *BootstrapError) Error() string {
	msg := "box " + e.Host + " bootstrap failed: " + e.Step
	if e.Output != "" {
		msg += ": its output ends:\n" + e.Output
	}
	return msg
}

// ParseBootstrapFailure reads the banner of a box's sshd: ok is false
// unless it is a failed bootstrap's (its first line begins with
// "crabbox-bootstrap-failed: "). The banner comes from the box, so what it
// keeps is bounded and printable: the step (at most 200 characters) and
// the last 10 lines of output (at most 1000 bytes). Host is left empty.
func ParseBootstrapFailure(banner string) (e BootstrapError, ok bool) {
	first, rest, _ := strings.Cut(banner, "\n")
	step, ok := strings.CutPrefix(strings.TrimRight(first, "\r"), failedPrefix)
	if !ok {
		return BootstrapError{}, false
	}
	e.Step = truncate(printable(step), maxFailedStep)
	if e.Step == "" {
		e.Step = "unknown step"
	}
	var lines []string
	for _, l := range strings.Split(rest, "\n") {
		if l = printable(l); l != "" {
			lines = append(lines, l)
		}
	}
	lines = lines[max(0, len(lines)-maxFailedLines):]
	out := strings.Join(lines, "\n")
	if len(out) > maxFailedOutput {
		out = out[len(out)-maxFailedOutput:]
		if i := strings.IndexByte(out, '\n'); i >= 0 && i < len(out)-1 {
			out = out[i+1:] // whole lines only
		}
	}
	e.Output = out
	return e, true
}

// printable keeps the printable ASCII of s (tabs become spaces) and trims
// spaces at both ends.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// truncate cuts s (ASCII) to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// BootstrapFailureBanner is the banner of a box whose bootstrap failed at
// step after printing output, as the bootstrap's failure path has sshd send
// it (from FailedMarker). Fake clouds serve it.
func BootstrapFailureBanner(step, output string) string {
	return failedPrefix + step + "\n" + output
}
