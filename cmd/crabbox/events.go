package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/lease"
)

// followFlags are the flags naming a coordinator run and how to follow it:
// the run as an argument or --id, --after and --poll.
type followFlags struct {
	id    string
	after int64
	poll  time.Duration
}

func (f *followFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.id, "id", "", "the run (instead of the argument)")
	fs.Int64Var(&f.after, "after", 0, "start after this event seq")
	fs.DurationVar(&f.poll, "poll", coordclient.DefaultFollowPoll, "how often to check the run's state while following, and to ask again when the coordinator cannot hold requests")
}

// run returns the run a command is about, checked.
func (f *followFlags) run(cmd string, args []string) (string, error) {
	id := f.id
	switch {
	case len(args) > 1:
		return "", usagef("%s: want one run ID, got %d arguments", cmd, len(args))
	case len(args) == 1 && id != "" && args[0] != id:
		return "", usagef("%s: run %q and --id %q differ: give one", cmd, args[0], id)
	case len(args) == 1:
		id = args[0]
	case id == "":
		return "", usagef("%s: want a run ID (see crabbox history)", cmd)
	}
	switch {
	case !lease.IsRunID(id):
		return "", usagef("%s: %q is not a run ID (run_ and 12 lowercase hex digits; see crabbox history)", cmd, id)
	case f.after < 0:
		return "", usagef("%s: --after %d: want 0 or more", cmd, f.after)
	case f.poll <= 0:
		return "", usagef("%s: --poll %s: want a positive duration", cmd, f.poll)
	}
	return id, nil
}

func (a *app) eventsCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("events")
	var rf followFlags
	rf.register(fs)
	limit := fs.Int("limit", 500, "print at most this many events (without --follow)")
	follow := fs.Bool("follow", false, "keep printing events as they are recorded, until the run finishes")
	asJSON := fs.Bool("json", false, "print JSON: an array, or with --follow one event per line")
	return &ffcli.Command{
		Name:       "events",
		ShortUsage: "crabbox events RUN_ID [--after SEQ] [--limit N] [--follow] [--json]",
		ShortHelp:  "print a coordinator run's events; --follow prints them as they are recorded",
		LongHelp: `Print the events a coordinator recorded for a run, oldest first: one line
each with its seq, type, phase, stream, time and message. The run may be
running elsewhere (another machine, CI) and the events are the coordinator's,
so this needs a coordinator (crabbox login, or CRABBOX_COORDINATOR and
CRABBOX_COORDINATOR_TOKEN). --after starts after an event seq; with --follow
the events are printed as they are recorded, over the coordinator's control
websocket (or requests it holds until there is an event), until the run
finishes. crabbox attach shows the run's output instead.

  crabbox events run_0123456789ab --follow`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			id, err := rf.run("events", args)
			if err != nil {
				return err
			}
			if *limit <= 0 {
				return usagef("events: --limit %d: want 1 or more", *limit)
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				emit := func(ev api.Event) error { return writeEventLine(a.stdout, ev) }
				if *asJSON {
					enc := json.NewEncoder(a.stdout)
					emit = func(ev api.Event) error { return enc.Encode(ev) }
				}
				if *follow {
					_, err := cl.FollowRun(ctx, id, coordclient.FollowOptions{After: rf.after, Poll: rf.poll}, emit)
					return err
				}
				evs, err := listEvents(ctx, cl, id, rf.after, *limit)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, evs)
				}
				for _, ev := range evs {
					if err := emit(ev); err != nil {
						return err
					}
				}
				return nil
			})
		}),
	}
}

// listEvents reads up to limit of a run's events after seq after, a page
// at a time.
func listEvents(ctx context.Context, cl *coordclient.Client, runID string, after int64, limit int) ([]api.Event, error) {
	out := []api.Event{}
	for len(out) < limit {
		want := min(limit-len(out), api.DefaultEventListLimit)
		page, err := cl.ListEvents(ctx, runID, after, want)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < want {
			break
		}
		after = page[len(page)-1].Seq
	}
	return out, nil
}

func (a *app) attachCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("attach")
	var rf followFlags
	rf.register(fs)
	return &ffcli.Command{
		Name:       "attach",
		ShortUsage: "crabbox attach RUN_ID [--after SEQ] [--poll DURATION]",
		ShortHelp:  "follow a coordinator run's output as it happens, from any machine",
		LongHelp: `Follow a run the coordinator records, started anywhere (another terminal,
another machine, CI): its output is printed as it is recorded, stdout to
stdout and stderr to stderr, and its other events (phases, lease, the
command's start and end) as one line each on stderr. attach exits when the
run finishes, with the run's exit code. It watches and controls nothing:
Ctrl-C ends attach, not the run. Output events are a preview of at most 8 MiB;
crabbox logs prints the run's stored log.

It follows over the coordinator's control websocket and, when that is refused
or breaks, over requests the coordinator holds until there is an event,
resuming after the last event printed: nothing is printed twice. --after
starts after an event seq (as crabbox events shows them). Needs a coordinator
(crabbox login, or CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN).

  crabbox attach run_0123456789ab`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			id, err := rf.run("attach", args)
			if err != nil {
				return err
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				run, err := cl.FollowRun(ctx, id, coordclient.FollowOptions{After: rf.after, Poll: rf.poll}, func(ev api.Event) error {
					return a.writeAttached(ev)
				})
				if err != nil {
					return err
				}
				switch {
				case run.ExitCode != nil && *run.ExitCode != 0:
					return exitError{*run.ExitCode}
				case run.ExitCode == nil && run.State != api.RunSucceeded:
					return fmt.Errorf("run %s %s without an exit code (see crabbox events %s)", id, run.State, id)
				}
				return nil
			})
		}),
	}
}

// writeAttached prints an event as attach does: output to its stream,
// anything else as a line on stderr.
func (a *app) writeAttached(ev api.Event) error {
	if text, stream, ok := outputOf(ev); ok {
		w := a.stdout
		if stream == api.StreamStderr {
			w = a.stderr
		}
		_, err := io.WriteString(w, text)
		return err
	}
	return writeEventLine(a.stderr, ev)
}

// outputOf returns the text and stream of an output event: ours (type
// output) or an upstream client's (type stdout or stderr), the text in its
// message or data.
func outputOf(ev api.Event) (text, stream string, ok bool) {
	if ev.Stream != api.StreamStdout && ev.Stream != api.StreamStderr {
		return "", "", false
	}
	if ev.Type != api.EventOutput && ev.Type != ev.Stream {
		return "", "", false
	}
	if ev.Message != "" {
		return ev.Message, ev.Stream, true
	}
	return ev.Data, ev.Stream, true
}

// writeEventLine prints an event on one line: seq, type, phase, stream,
// time, and its message (or data) with line breaks escaped.
func writeEventLine(w io.Writer, ev api.Event) error {
	phase, stream := ev.Phase, ev.Stream
	if phase == "" {
		phase = "-"
	}
	if stream == "" {
		stream = "-"
	}
	text := ev.Message
	if text == "" {
		text = ev.Data
	}
	text = strings.TrimRight(text, "\n")
	text = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(text)
	line := fmt.Sprintf("%04d %-16s phase=%-9s stream=%-6s at=%s", ev.Seq, ev.Type, phase, stream, ev.CreatedAt.UTC().Format(time.RFC3339))
	if text != "" {
		line += " " + text
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
