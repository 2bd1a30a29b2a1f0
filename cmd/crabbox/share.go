package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// shareTargets are the flags naming who a share or unshare is about:
// --with alice,bob (and the upstream client's repeatable --user), --org,
// and the lease as an argument or --id.
type shareTargets struct {
	id         string
	with, user stringList
	org        bool
}

// lease returns the lease the command is about: its one argument or --id.
func (t *shareTargets) lease(cmd string, args []string) (string, error) {
	switch {
	case len(args) > 1:
		return "", usagef("%s: want one lease ID or slug, got %d arguments", cmd, len(args))
	case len(args) == 1 && t.id != "" && args[0] != t.id:
		return "", usagef("%s: lease %q and --id %q differ: give one", cmd, args[0], t.id)
	case len(args) == 1:
		return args[0], nil
	case t.id != "":
		return t.id, nil
	}
	return "", usagef("%s: want a lease ID or slug", cmd)
}

// users returns the users --with and --user name, in order.
func (t *shareTargets) users(cmd string) ([]string, error) {
	var out []string
	for _, v := range append(append([]string(nil), t.with...), t.user...) {
		for u := range strings.SplitSeq(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				return nil, usagef("%s: an empty user in %q", cmd, v)
			}
			out = append(out, u)
		}
	}
	return out, nil
}

func (a *app) shareCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("share")
	var t shareTargets
	fs.StringVar(&t.id, "id", "", "the lease (instead of the argument)")
	fs.Var(&t.with, "with", "`USER[,USER]` to share with: owner identities such as github:12345; repeatable")
	fs.Var(&t.user, "user", "a `USER` to share with (as --with); repeatable")
	fs.BoolVar(&t.org, "org", false, "share with every user of the lease's org")
	use := fs.Bool("use", false, "grant use: also run, ssh and open the terminal (default: read)")
	manage := fs.Bool("manage", false, "grant manage: also change the sharing and stop the lease")
	role := fs.String("role", "", "the role to grant: read, use or manage (default read)")
	list := fs.Bool("list", false, "only print who the lease is shared with")
	asJSON := fs.Bool("json", false, "print the share as JSON")
	return &ffcli.Command{
		Name:       "share",
		ShortUsage: "crabbox share ID|slug [--with USER[,USER]] [--org] [--use|--manage] [--list] [--json]",
		ShortHelp:  "let others see or use a coordinator lease (--with users, --org)",
		LongHelp: `Share a coordinator lease with other users, or with everyone of the lease's
org, and print who it is shared with afterwards. Users are owner identities as
crabbox whoami shows them (github:12345). The role is read by default (see the
lease, its runs, their logs and events); --use also lets them work on the box
(runs, ssh and the terminal through the coordinator), --manage also lets them
change the sharing and stop the lease. Sharing again changes a user's role;
others keep theirs. Without users or --org (or with --list) it only prints the
sharing: "org=ROLE" or "org=off", then "user=NAME role=ROLE" lines or
"users=none". A share ends with the lease; crabbox unshare takes it back.

Needs a coordinator (crabbox login, or CRABBOX_COORDINATOR and
CRABBOX_COORDINATOR_TOKEN); only the lease's owner, an admin or a user with
manage may list or change its sharing.

  crabbox share tidal-lobster --with github:12345,github:67890
  crabbox share tidal-lobster --org --use`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := t.lease("share", args)
			if err != nil {
				return err
			}
			users, err := t.users("share")
			if err != nil {
				return err
			}
			r, err := shareRole(*role, *use, *manage)
			if err != nil {
				return err
			}
			if *list && (len(users) > 0 || t.org) {
				return usagef("share: --list changes nothing: give it without --with, --user or --org")
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				var out api.ShareResponse
				var err error
				if len(users) == 0 && !t.org {
					out, err = c.LeaseShare(ctx, ref)
				} else {
					out, err = c.ShareLease(ctx, ref, crabbox.ShareChange{Users: users, Org: t.org, Role: r})
				}
				if err != nil {
					return err
				}
				return a.writeShare(out, *asJSON)
			})
		}),
	}
}

// shareRole is the role --role, --use and --manage ask for; at most one
// of them may be given.
func shareRole(role string, use, manage bool) (api.ShareRole, error) {
	var asked []api.ShareRole
	if role != "" {
		r := api.ShareRole(strings.ToLower(strings.TrimSpace(role)))
		if !r.Valid() {
			return "", usagef("share: --role %q: want read, use or manage", role)
		}
		asked = append(asked, r)
	}
	if use {
		asked = append(asked, api.ShareUse)
	}
	if manage {
		asked = append(asked, api.ShareManage)
	}
	switch {
	case len(asked) > 1 && !(len(asked) == 2 && asked[0] == asked[1]):
		return "", usagef("share: give one of --role, --use and --manage")
	case len(asked) == 0:
		return api.ShareRead, nil
	}
	return asked[0], nil
}

func (a *app) unshareCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("unshare")
	var t shareTargets
	fs.StringVar(&t.id, "id", "", "the lease (instead of the argument)")
	fs.Var(&t.with, "with", "`USER[,USER]` whose grants to remove; repeatable")
	fs.Var(&t.user, "user", "a `USER` whose grant to remove (as --with); repeatable")
	fs.BoolVar(&t.org, "org", false, "remove the grant to the lease's org")
	all := fs.Bool("all", false, "remove every grant")
	asJSON := fs.Bool("json", false, "print the share that is left as JSON")
	return &ffcli.Command{
		Name:       "unshare",
		ShortUsage: "crabbox unshare ID|slug (--with USER[,USER] | --org | --all) [--json]",
		ShortHelp:  "take back what crabbox share granted",
		LongHelp: `Remove grants from a coordinator lease's sharing: named users' (--with),
the org's (--org), or all of them (--all), and print what is left as share
does. Access through a removed grant ends at once, open terminals and tunnels
included. A user removed by name still has what an org grant gives them.

  crabbox unshare tidal-lobster --with github:12345
  crabbox unshare tidal-lobster --all`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := t.lease("unshare", args)
			if err != nil {
				return err
			}
			users, err := t.users("unshare")
			if err != nil {
				return err
			}
			if !*all && len(users) == 0 && !t.org {
				return usagef("unshare: say what to remove: --with USER, --org or --all")
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				out, err := c.UnshareLease(ctx, ref, crabbox.Unshare{Users: users, Org: t.org, All: *all})
				if err != nil {
					return err
				}
				return a.writeShare(out, *asJSON)
			})
		}),
	}
}

// writeShare prints a lease's share: the coordinator's JSON, or a line for
// the org and one per user.
func (a *app) writeShare(r api.ShareResponse, asJSON bool) error {
	if asJSON {
		return writeJSON(a.stdout, r)
	}
	return writeShareText(a.stdout, r.Share)
}

func writeShareText(w io.Writer, s api.LeaseShare) error {
	org := string(s.Org)
	if org == "" {
		org = "off"
	}
	fmt.Fprintf(w, "org=%s\n", org)
	users := s.SortedUsers()
	if len(users) == 0 {
		_, err := fmt.Fprintln(w, "users=none")
		return err
	}
	for _, u := range users {
		if _, err := fmt.Fprintf(w, "user=%s role=%s\n", u, s.Users[u]); err != nil {
			return err
		}
	}
	return nil
}
