package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

// envPoolRefill turns the background refill of a pool after run --pool
// or warmup --pool off when "0", "false", "off" or "no".
const envPoolRefill = "CRABBOX_POOL_REFILL"

func (a *app) poolCmd() *ffcli.Command {
	subs := []*ffcli.Command{a.poolListCmd(), a.poolEnsureCmd(), a.poolDrainCmd()}
	for _, s := range subs {
		s.FlagSet.SetOutput(a.stderr)
	}
	return &ffcli.Command{
		Name:       "pool",
		ShortUsage: "crabbox pool list|ensure|drain ...",
		ShortHelp:  "keep ready boxes that run --pool and warmup --pool take at once",
		LongHelp: `Keep boxes ready ahead of demand: crabbox run --pool KEY and crabbox warmup
--pool KEY take one at once instead of waiting for the provider, and crabbox
refills the pool in the background (CRABBOX_POOL_REFILL=0 turns that off).

Without a coordinator a pool lives in the state directory: its idle boxes are
ordinary leases of this user (crabbox list shows them), marked with the pool,
that expire after --max-age like any lease, and crabbox cleanup deletes them
then. A box is handed out only when it answers and was never used. With a
coordinator that brokers the provider, the pool is the coordinator's (admin
only).

  crabbox pool ensure --provider docker --size 3
  crabbox run --pool docker -- go test ./...
  crabbox pool list
  crabbox pool drain docker`,
		FlagSet:     flag.NewFlagSet("pool", flag.ContinueOnError),
		Subcommands: subs,
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) poolEnsureCmd() *ffcli.Command {
	fs, lf := a.newFlagSet("pool ensure")
	key := fs.String("pool", "", "the pool's key (default: the provider's name, plus -CLASS when a class is set)")
	size := fs.Int("size", 0, "how many ready boxes the pool keeps (without it: refill the pool --pool names to the size it was made with)")
	maxAge := fs.Duration("max-age", 0, "an idle box expires this long after it was made (default 6h; 5m to 168h)")
	var labels stringList
	fs.Var(&labels, "label", "a `KEY=VALUE` label for the pool's boxes (repeatable)")
	asJSON := fs.Bool("json", false, "print the pool as JSON")
	return &ffcli.Command{
		Name:       "ensure",
		ShortUsage: "crabbox pool ensure [flags] [--provider P] --size N [--pool KEY]",
		ShortHelp:  "define a ready pool and make its missing boxes",
		LongHelp: `Define (or redefine) a ready pool and bring it to --size: boxes past their
maximum age and boxes beyond the size are released, the missing ones are made
(a few at once) with the provider and the provider flags given here, which the
pool keeps for every box it makes later. Without --size it refills the pool
--pool names with what it was made with. It prints the pool's key and how many
boxes are ready.

  crabbox pool ensure --provider docker --size 3 --max-age 2h
  crabbox pool ensure --pool docker`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("pool ensure takes no arguments, got %q", args)
			}
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			switch {
			case set["size"] && *size < 0:
				return usagef("pool ensure: --size must not be negative")
			case !set["size"] && *key == "":
				return usagef("pool ensure: give --size N (or --pool KEY to refill a pool to its size)")
			case !set["size"] && (set["max-age"] || len(labels) > 0):
				return usagef("pool ensure: --max-age and --label define a pool: give --size too")
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				var info crabbox.PoolInfo
				if set["size"] {
					info, err = c.EnsurePool(ctx, crabbox.PoolOptions{
						Key: *key, Provider: lf.provider, Size: *size, MaxAge: *maxAge, Labels: lbls,
					})
				} else {
					info, err = c.RefillPool(ctx, *key)
				}
				return a.reportPool(info, err, *asJSON, fmt.Sprintf("%s %d/%d ready", info.Key, info.Ready, info.Size))
			})
		}),
	}
}

func (a *app) poolListCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("pool list")
	asJSON := fs.Bool("json", false, "print a JSON array")
	return &ffcli.Command{
		Name:       "list",
		ShortUsage: "crabbox pool list [--json]",
		ShortHelp:  "list the ready pools",
		LongHelp: `List the ready pools: the state directory's, by key, then the coordinator's
(with a coordinator; an admin's view). Each with its provider, size, ready and
provisioning boxes, maximum age and where it lives (local, or the
coordinator's URL).

  crabbox pool list --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("pool list takes no arguments, got %q", args)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				pools, err := c.Pools(ctx)
				if errors.Is(err, crabbox.ErrCoordinatorPools) {
					fmt.Fprintf(a.stderr, "crabbox: warning: %s\n", oneLine(err))
				} else if err != nil {
					return err
				}
				if *asJSON {
					if pools == nil {
						pools = []crabbox.PoolInfo{}
					}
					return writeJSON(a.stdout, pools)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY\tPROVIDER\tSIZE\tREADY\tPROVISIONING\tMAX AGE\tWHERE")
				for _, p := range pools {
					where := "local"
					if p.Coordinator != "" {
						where = p.Coordinator
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Key, p.Provider, p.Size, p.Ready, p.Provisioning,
						time.Duration(p.MaxAgeSeconds)*time.Second, where)
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) poolDrainCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("pool drain")
	asJSON := fs.Bool("json", false, "print the drained pool as JSON")
	return &ffcli.Command{
		Name:       "drain",
		ShortUsage: "crabbox pool drain [--json] [KEY]",
		ShortHelp:  "remove a ready pool and release its idle boxes",
		LongHelp: `Remove a ready pool (KEY; default: the provider's name) and release its idle
boxes. Boxes already taken from it are ordinary leases and stay. A pool the
state directory does not hold is deleted at the coordinator, when there is
one.

  crabbox pool drain docker`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) > 1 {
				return usagef("pool drain takes at most one pool key, got %q", args)
			}
			key := lf.provider
			if len(args) == 1 {
				key = args[0]
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				info, err := c.DrainPool(ctx, key)
				return a.reportPool(info, err, *asJSON, fmt.Sprintf("drained %s: %s released", info.Key, countBoxes(info.Removed)))
			})
		}),
	}
}

// tookFromPool reports, after an acquire that named the ready pool key
// (run --pool, warmup --pool), whether the box came from it: when it did
// not, a line on stderr says so; when it came from a pool of the state
// directory, the pool is refilled in the background.
func (a *app) tookFromPool(lf *leaseFlags, c *crabbox.Client, key string, p *crabbox.LeasePool) {
	if p == nil || !p.Hit {
		fmt.Fprintf(a.stderr, "crabbox: pool %s had no ready box; acquired one the ordinary way\n", key)
	}
	if p != nil && p.Coordinator != "" {
		return // the coordinator refills its pools
	}
	a.refillPool(lf, c, key)
}

// refillPool starts `crabbox pool ensure --pool KEY` in the background
// (unless CRABBOX_POOL_REFILL is off), so that the next run finds a ready
// box; its diagnostics go to <state>/pools/KEY.refill.log.
func (a *app) refillPool(lf *leaseFlags, c *crabbox.Client, key string) {
	if envOff(envPoolRefill) {
		return
	}
	args := []string{"pool", "ensure", "--pool", key}
	if lf.config != a.configFile {
		// Given with --config; CRABBOX_* variables (CRABBOX_CONFIG
		// among them) the background process inherits.
		args = append(args, "--config", lf.config)
	}
	start := a.startRefill
	if start == nil {
		start = startRefill
	}
	if err := start(args, filepath.Join(c.StateDir(), "pools", key+".refill.log")); err != nil {
		fmt.Fprintf(a.stderr, "crabbox: pool %s not refilled in the background: %s (crabbox pool ensure --pool %s refills it)\n", key, oneLine(err), key)
	}
}

// startRefill runs this program with args in the background (see
// refill_unix.go and refill_other.go).
func startRefill(args []string, logFile string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return startBackground(exe, args, logFile)
}

// reportPool prints the pool a pool command left (as JSON, or line) and
// returns its error: a pool that failed in part is still shown.
func (a *app) reportPool(info crabbox.PoolInfo, err error, asJSON bool, line string) error {
	if err != nil && info.Key == "" {
		return err
	}
	if asJSON {
		if jerr := writeJSON(a.stdout, info); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintln(a.stdout, line)
	}
	return err
}

// countBoxes is "1 box" or "N boxes".
func countBoxes(n int) string {
	if n == 1 {
		return "1 box"
	}
	return fmt.Sprintf("%d boxes", n)
}
