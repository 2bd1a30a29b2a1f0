package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"
	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

func (a *app) loginCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("login")
	withToken := fs.Bool("token", false, "read a crabbox user token from stdin (a prompt without echo on a terminal) instead of signing in with GitHub")
	return &ffcli.Command{
		Name:       "login",
		ShortUsage: "crabbox login [--token] [URL]",
		ShortHelp:  "sign in to a coordinator and save the sign-in for later commands",
		LongHelp: `Sign in to the coordinator at URL (default $CRABBOX_COORDINATOR) and save its
URL and your token in your config directory (crabbox/login.json, mode 0600),
so that later commands broker leases through it without environment
variables. CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN, when set, still
win.

By default you sign in with GitHub: crabbox prints a code to enter at
GitHub's device page and waits; the coordinator then issues you a token if
your GitHub account is in an org (or team) it allows. While waiting, crabbox
polls through brief outages (a 5xx or no answer is retried, at most 5 times
in a row, pausing up to 30 s); a refusal ends it with the coordinator's
reason. With --token, paste a
token your admin issued instead (read from stdin, never from the command
line); it is checked with the coordinator before it is saved.

  crabbox login https://crabbox.example.com
  crabbox login --token https://crabbox.example.com < token.txt`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) (err error) {
			if len(args) > 1 {
				return usagef("login: want at most one coordinator URL, got %d arguments", len(args))
			}
			url := os.Getenv(config.EnvCoordinator)
			if len(args) == 1 {
				url = args[0]
			}
			if url == "" {
				return usagef("login: no coordinator URL: pass one (crabbox login https://crabbox.example.com) or set %s", config.EnvCoordinator)
			}
			var token string
			var cl *coordclient.Client
			var who api.Whoami
			if *withToken {
				if token, err = a.readToken(); err != nil {
					return err
				}
				if cl, err = coordclient.New(url, token); err != nil {
					return fmt.Errorf("login: %w", err)
				}
				defer cl.CloseIdleConnections()
				who, err = cl.Whoami(ctx)
				var apiErr *coordclient.Error
				if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized {
					return fmt.Errorf("login: %s refused the token (%s); nothing was saved", cl.URL(), apiErr.Message)
				}
				if err != nil {
					return fmt.Errorf("login: %w; nothing was saved", err)
				}
			} else {
				if cl, token, who, err = a.deviceLogin(ctx, url); err != nil {
					return err
				}
				defer cl.CloseIdleConnections()
			}
			file := config.LoginFile(os.Environ())
			if file == "" {
				return errors.New("login: no user config directory to save the sign-in in (set HOME or XDG_CONFIG_HOME)")
			}
			if err := config.SaveLogin(file, config.Login{URL: cl.URL(), Token: token}); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Logged in to %s as %s.\nSaved in %s.\n", cl.URL(), describeWho(who), file)
			if os.Getenv(config.EnvCoordinator) != "" || os.Getenv(config.EnvCoordinatorToken) != "" {
				fmt.Fprintf(a.stderr, "crabbox: note: %s and %s in your environment win over this sign-in; unset them to use it\n", config.EnvCoordinator, config.EnvCoordinatorToken)
			}
			return nil
		}),
	}
}

// deviceLogin signs in with GitHub's device flow through the coordinator
// at url: it shows the code to enter, polls at the interval GitHub asks for,
// and returns the token the coordinator issued.
func (a *app) deviceLogin(ctx context.Context, url string) (*coordclient.Client, string, api.Whoami, error) {
	anon, err := coordclient.New(url, "", coordclient.Anonymous())
	if err != nil {
		return nil, "", api.Whoami{}, fmt.Errorf("login: %w", err)
	}
	defer anon.CloseIdleConnections()
	d, err := anon.StartDevice(ctx)
	var apiErr *coordclient.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return nil, "", api.Whoami{}, fmt.Errorf("login: %s has no GitHub sign-in; ask your admin for a token and use crabbox login --token", anon.URL())
	}
	if err != nil {
		return nil, "", api.Whoami{}, fmt.Errorf("login: %w", err)
	}
	fmt.Fprintf(a.stderr, "Open %s and enter the code %s", d.VerificationURI, d.UserCode)
	if !d.ExpiresAt.IsZero() {
		fmt.Fprintf(a.stderr, " (valid until %s)", d.ExpiresAt.Local().Format(time.TimeOnly))
	}
	fmt.Fprintln(a.stderr, ". Waiting for GitHub...")
	tok, err := anon.WaitDevice(ctx, d, func(err error, wait time.Duration) {
		fmt.Fprintf(a.stderr, "crabbox: polling the sign-in failed (%v); trying again in %s\n", err, wait)
	})
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusForbidden:
		return nil, "", api.Whoami{}, fmt.Errorf("login: %s; nothing was saved", apiErr.Message)
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusGone:
		return nil, "", api.Whoami{}, errors.New("login: the code expired before the sign-in; run crabbox login again")
	case errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Message != "":
		return nil, "", api.Whoami{}, fmt.Errorf("login: %s; nothing was saved", apiErr.Message)
	case err != nil:
		return nil, "", api.Whoami{}, fmt.Errorf("login: %w; nothing was saved", err)
	}
	cl, err := coordclient.New(url, tok.Token)
	if err != nil {
		return nil, "", api.Whoami{}, fmt.Errorf("login: %w", err)
	}
	return cl, tok.Token, api.Whoami{Owner: tok.Owner, Org: tok.Org, Auth: api.AuthGitHub, TokenExpiresAt: tok.ExpiresAt}, nil
}

// readToken reads a token from stdin: with a prompt and no echo on a
// terminal, else the first line.
func (a *app) readToken() (string, error) {
	var token string
	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.stderr, "Paste your crabbox token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("login: read the token: %w", err)
		}
		token = string(b)
	} else {
		line, err := bufio.NewReader(io.LimitReader(a.stdin, 64<<10)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("login: read the token from stdin: %w", err)
		}
		token = line
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", usagef("login: no token on stdin (crabbox login --token URL < token-file)")
	}
	return token, nil
}

// describeWho says who a token is: "owner (org org, admin)".
func describeWho(w api.Whoami) string {
	s := w.Owner + " (org " + w.Org
	if w.Admin {
		s += ", admin"
	}
	if !w.TokenExpiresAt.IsZero() {
		s += ", token expires " + w.TokenExpiresAt.UTC().Format(time.RFC3339)
	}
	return s + ")"
}

func (a *app) logoutCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("logout")
	keep := fs.Bool("keep-token", false, "only forget the saved sign-in here; the token stays valid on the coordinator")
	return &ffcli.Command{
		Name:       "logout",
		ShortUsage: "crabbox logout [--keep-token]",
		ShortHelp:  "revoke the saved coordinator token and forget the sign-in",
		LongHelp: `Revoke the token crabbox login saved at its coordinator, then remove the
saved URL and token (crabbox/login.json in your config directory). From then
on the coordinator refuses that token, wherever a copy of it is.

If the coordinator cannot be reached or fails, nothing is removed and logout
fails, so you can try again: a token that is only forgotten stays valid
until it expires (30 days for a GitHub sign-in). A token the coordinator
already refuses (expired or revoked) is just forgotten; so is an admin or
shared token, which only changing it on the coordinator ends.

With --keep-token, only the saved sign-in here is removed and the token
stays valid: for example when you copied it elsewhere on purpose. Revoke it
later on the portal's Tokens page or with crabbox admin revoke-token.

  crabbox logout
  crabbox logout --keep-token`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("logout: takes no arguments, got %d", len(args))
			}
			file := config.LoginFile(os.Environ())
			if file == "" {
				fmt.Fprintln(a.stdout, "Not logged in (no user config directory).")
				return nil
			}
			saved, ok, _ := config.ReadLogin(file)
			note := ""
			if ok && !*keep {
				var err error
				if note, err = revokeSaved(ctx, saved); err != nil {
					return err
				}
			} else if ok {
				note = "the token stays valid on the coordinator"
			}
			removed, err := config.RemoveLogin(file)
			switch {
			case err != nil:
				return err
			case !removed:
				fmt.Fprintln(a.stdout, "Not logged in.")
			case ok:
				fmt.Fprintf(a.stdout, "Logged out of %s (removed %s): %s.\n", saved.URL, file, note)
			default:
				fmt.Fprintf(a.stdout, "Removed %s.\n", file)
			}
			return nil
		}),
	}
}

// revokeSaved revokes the saved sign-in's token at its coordinator and
// says what became of it. It fails, so that the sign-in is kept, when the
// coordinator did not answer or failed.
func revokeSaved(ctx context.Context, saved config.Login) (string, error) {
	cl, err := coordclient.New(saved.URL, saved.Token)
	if err != nil {
		return "", fmt.Errorf("logout: %w", err)
	}
	defer cl.CloseIdleConnections()
	_, err = cl.RevokeCurrentToken(ctx)
	var apiErr *coordclient.Error
	switch {
	case err == nil:
		return "the token is revoked", nil
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
		return "the coordinator already refuses the token (" + apiErr.Message + ")", nil
	case coordclient.IsCode(err, api.CodeTokenNotRevocable):
		return "the token is an admin or shared token, which the coordinator cannot revoke; it stays valid", nil
	}
	return "", fmt.Errorf("logout: could not revoke the token at %s: %w\nNothing was removed: try again, or run crabbox logout --keep-token to only forget the sign-in here (the token then stays valid until it expires)", saved.URL, err)
}

// withCoordinator runs fn with a client of the coordinator the settings
// name (see coordinatorOf).
func withCoordinator(s config.Settings, fn func(*coordclient.Client) error) error {
	cl, err := coordinatorOf(s)
	if err != nil {
		return err
	}
	defer cl.CloseIdleConnections()
	return fn(cl)
}

// coordinatorOf returns a client of the coordinator the settings name, or
// an error saying how to name one.
func coordinatorOf(s config.Settings) (*coordclient.Client, error) {
	c := s.Coordinator
	if c.URL == "" || c.Token == "" {
		return nil, fmt.Errorf("no coordinator: run crabbox login --token URL, or set %s and %s", config.EnvCoordinator, config.EnvCoordinatorToken)
	}
	return coordclient.New(c.URL, c.Token)
}

func (a *app) whoamiCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("whoami")
	asJSON := fs.Bool("json", false, "print JSON")
	return &ffcli.Command{
		Name:       "whoami",
		ShortUsage: "crabbox whoami [--json]",
		ShortHelp:  "show who the coordinator takes you for",
		LongHelp: `Ask the coordinator (from crabbox login, or CRABBOX_COORDINATOR and
CRABBOX_COORDINATOR_TOKEN) who its token belongs to: owner, org, whether it
is an admin, and when the token expires.

  crabbox whoami --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("whoami: takes no arguments, got %d", len(args))
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				who, err := cl.Whoami(ctx)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, struct {
						Coordinator string `json:"coordinator"`
						api.Whoami
					}{cl.URL(), who})
				}
				fmt.Fprintf(a.stdout, "%s at %s\n", describeWho(who), cl.URL())
				return nil
			})
		}),
	}
}

func (a *app) adminCmd() *ffcli.Command {
	fs, _ := a.newLocalFlagSet("admin")
	return &ffcli.Command{
		Name:       "admin",
		ShortUsage: "crabbox admin <leases|release|tokens|revoke-token> ...",
		ShortHelp:  "every owner's coordinator leases and tokens: list, release, revoke (admin token)",
		LongHelp: `Commands for coordinator admins: they need an admin token (crabbox login,
or CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN).

  crabbox admin leases --state active
  crabbox admin tokens --owner alice
  crabbox admin revoke-token 3b241101-e2bb-4255-8caf-4136c566a962`,
		FlagSet:     fs,
		Subcommands: []*ffcli.Command{a.adminLeasesCmd(), a.adminReleaseCmd(), a.adminTokensCmd(), a.adminRevokeTokenCmd()},
		Exec: func(context.Context, []string) error {
			return usagef("admin: want a subcommand: leases, release, tokens or revoke-token")
		},
	}
}

func (a *app) adminLeasesCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("admin leases")
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "only leases in this state (provisioning, active, released, expired, failed)")
	return &ffcli.Command{
		Name:       "leases",
		ShortUsage: "crabbox admin leases [--state STATE] [--json]",
		ShortHelp:  "list every owner's leases, newest first",
		LongHelp: `List the coordinator's leases of every owner and org, newest first.

  crabbox admin leases --state active`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("admin leases: takes no arguments, got %d", len(args))
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				leases, err := cl.AdminListLeases(ctx)
				if err != nil {
					return err
				}
				shown := leases[:0]
				for _, l := range leases {
					if *state == "" || string(l.State) == *state {
						shown = append(shown, l)
					}
				}
				if *asJSON {
					return writeJSON(a.stdout, map[string]any{"leases": shown})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSLUG\tOWNER\tORG\tPROVIDER\tSTATE\tEXPIRES")
				for _, l := range shown {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Slug, l.Owner, l.Org, l.Provider, l.State, l.ExpiresAt.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) adminReleaseCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("admin release")
	return &ffcli.Command{
		Name:       "release",
		ShortUsage: "crabbox admin release ID|slug",
		ShortHelp:  "release any owner's lease; the coordinator deletes its box",
		LongHelp: `Release a coordinator lease of any owner by ID or slug; the coordinator
deletes its box unless the lease is kept or registered.

  crabbox admin release cbx_0123456789ab`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				l, err := cl.AdminRelease(ctx, ref)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "released %s (%s, owner %s): %s\n", l.ID, l.Slug, l.Owner, l.State)
				return nil
			})
		}),
	}
}

func (a *app) adminTokensCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("admin tokens")
	owner := fs.String("owner", "", "only this owner's tokens")
	org := fs.String("org", "", "only tokens in this org")
	asJSON := fs.Bool("json", false, "print JSON")
	return &ffcli.Command{
		Name:       "tokens",
		ShortUsage: "crabbox admin tokens [--owner OWNER] [--org ORG] [--json]",
		ShortHelp:  "list the user tokens the coordinator issued and the revoked ones",
		LongHelp: `List the user tokens the coordinator issued (GitHub sign-ins), newest
first, with the revocations; a revoked ID it never issued (a token minted
offline with crabbox coordinator token issue) shows without an owner.
Tokens themselves are never stored or shown, only their IDs.

  crabbox admin tokens --owner alice`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("admin tokens: takes no arguments, got %d", len(args))
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				tokens, err := cl.AdminListTokens(ctx, *owner, *org)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, api.TokensResponse{Tokens: tokens})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tOWNER\tORG\tSOURCE\tCREATED\tEXPIRES\tREVOKED")
				stamp := func(t time.Time) string {
					if t.IsZero() {
						return "-"
					}
					return t.UTC().Format(time.RFC3339)
				}
				for _, t := range tokens {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, cmp.Or(t.Owner, "-"), cmp.Or(t.Org, "-"), cmp.Or(t.Source, "-"),
						stamp(t.CreatedAt), stamp(t.ExpiresAt), stamp(t.RevokedAt))
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) adminRevokeTokenCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("admin revoke-token")
	return &ffcli.Command{
		Name:       "revoke-token",
		ShortUsage: "crabbox admin revoke-token ID",
		ShortHelp:  "revoke a user token by its ID; it is refused from its next request",
		LongHelp: `Revoke a user token by its ID (the token's jti, as crabbox admin tokens
lists it or crabbox coordinator token issue printed it). The token is
refused from its next request (on other coordinator replicas within about a
second). An ID the coordinator never issued is recorded as revoked too, so
tokens minted offline can be revoked. Revoking again changes nothing.

  crabbox admin revoke-token 3b241101-e2bb-4255-8caf-4136c566a962`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			id, err := oneArg(args, "token ID")
			if err != nil {
				return err
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				t, err := cl.RevokeToken(ctx, id)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "revoked %s (owner %s) at %s\n", t.ID, cmp.Or(t.Owner, "unknown"), t.RevokedAt.UTC().Format(time.RFC3339))
				return nil
			})
		}),
	}
}

func (a *app) usageCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("usage")
	org := fs.Bool("org", false, "your org's usage instead of yours")
	all := fs.Bool("all", false, "everyone's usage (admin token)")
	month := fs.String("month", "", "month as YYYY-MM (default: this month)")
	asJSON := fs.Bool("json", false, "print the coordinator's JSON")
	return &ffcli.Command{
		Name:       "usage",
		ShortUsage: "crabbox usage [--org|--all] [--month YYYY-MM] [--json]",
		ShortHelp:  "show a month's coordinator usage and spend against the limits",
		LongHelp: `Show a month's leases, runtime and estimated spend at the coordinator (from
crabbox login, or CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN): yours,
your org's (--org) or everyone's (--all, admins), by provider and server type,
with the configured limits.

  crabbox usage --org --month 2026-11`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("usage: takes no arguments, got %d", len(args))
			}
			if *org && *all {
				return usagef("usage: --org and --all exclude each other")
			}
			if *month != "" {
				if _, err := time.Parse("2006-01", *month); err != nil {
					return usagef("usage: --month %q: want YYYY-MM", *month)
				}
			}
			scope := api.ScopeUser
			switch {
			case *org:
				scope = api.ScopeOrg
			case *all:
				scope = api.ScopeAll
			}
			return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
				u, err := cl.Usage(ctx, scope, *month)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, u)
				}
				return writeUsage(a.stdout, u)
			})
		}),
	}
}

// writeUsage prints a usage response as totals, groups and limits.
func writeUsage(w io.Writer, r api.UsageResponse) error {
	u := r.Usage
	who := map[string]string{api.ScopeUser: u.Owner, api.ScopeOrg: "org " + u.Org, api.ScopeAll: "everyone"}[u.Scope]
	fmt.Fprintf(w, "%s, %s: %d leases (%d active), %s runtime, estimated $%.2f, reserved $%.2f\n",
		who, u.Month, u.Leases, u.ActiveLeases, time.Duration(u.RuntimeSeconds)*time.Second, u.EstimatedUSD, u.ReservedUSD)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range []struct {
		name   string
		groups []api.UsageGroup
	}{{"OWNER", u.ByOwner}, {"PROVIDER", u.ByProvider}, {"SERVER TYPE", u.ByServerType}} {
		if len(g.groups) == 0 || (g.name == "OWNER" && u.Scope == api.ScopeUser) {
			continue
		}
		fmt.Fprintf(tw, "\n%s\tLEASES\tACTIVE\tRUNTIME\tESTIMATED\tRESERVED\n", g.name)
		for _, x := range g.groups {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t$%.2f\t$%.2f\n", cmp.Or(x.Key, "-"), x.Leases, x.ActiveLeases, time.Duration(x.RuntimeSeconds)*time.Second, x.EstimatedUSD, x.ReservedUSD)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	l := r.Limits
	fmt.Fprintf(w, "\nlimits: active leases %s per owner, %s per org, %s in all; monthly spend %s per owner, %s per org, %s in all\n",
		limitCount(l.MaxActiveLeasesPerOwner), limitCount(l.MaxActiveLeasesPerOrg), limitCount(l.MaxActiveLeases),
		limitUSD(l.MaxMonthlyUSDPerOwner), limitUSD(l.MaxMonthlyUSDPerOrg), limitUSD(l.MaxMonthlyUSD))
	return nil
}

func limitCount(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func limitUSD(v float64) string {
	if v == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("$%.2f", v)
}
