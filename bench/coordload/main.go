// Command coordload measures the coordinator under load: lease create,
// heartbeat and release, and run create, events and finish, from 1, 10 and
// 100 concurrent clients against an in-process coordinator with a fake
// provider, reporting throughput and p50/p99 latency per operation as the
// median and min–max over -runs runs, with the load average seen.
//
//	go run ./bench/coordload [-scenario full|heartbeat|lease] [-clients 1,10,100]
//	    [-iterations 500] [-runs 3] [-max-duration 60s] [-postgres DSN] [-json]
//	    [-cpuprofile FILE]
//
// Scenario full: each iteration of a client is one lease's life: create,
// -heartbeats heartbeats, a run with -events events and its finish, and
// release. Scenario heartbeat: each client creates one lease (not
// measured) and each iteration is one heartbeat of it. Scenario lease:
// each iteration is a create and a release. A run stops after -iterations
// iterations in all or -max-duration, whichever comes first; every run
// starts a fresh coordinator on the same store. Clients keep their HTTP
// connections alive. SQLite runs in a fresh temporary database; with
// -postgres (or CRABBOX_BENCH_POSTGRES) the same levels run against that
// PostgreSQL database too: use a throwaway database, the benchmark's leases
// stay in it. The coordinator listens on 127.0.0.1 only; nothing else is
// contacted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/postgres"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

type config struct {
	scenario    string
	runs        int
	clients     []int
	iterations  int
	maxDuration time.Duration
	heartbeats  int
	events      int
	postgres    string
	tokens      string
	json        bool
}

func main() {
	var cfg config
	clients := flag.String("clients", "1,10,100", "comma-separated numbers of concurrent clients, one level each")
	flag.StringVar(&cfg.scenario, "scenario", "full", "what an iteration is: full (a lease's life with a run), heartbeat (one heartbeat) or lease (create and release)")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per level; numbers are the median and min-max over them")
	flag.IntVar(&cfg.iterations, "iterations", 500, "lease lifetimes per level, over all clients")
	flag.DurationVar(&cfg.maxDuration, "max-duration", time.Minute, "time limit per level")
	flag.IntVar(&cfg.heartbeats, "heartbeats", 5, "heartbeats per lease")
	flag.IntVar(&cfg.events, "events", 5, "run events per lease")
	flag.StringVar(&cfg.postgres, "postgres", os.Getenv("CRABBOX_BENCH_POSTGRES"), "PostgreSQL DSN to measure too (default $CRABBOX_BENCH_POSTGRES; prefer the variable: a password in a flag shows in the process list)")
	flag.StringVar(&cfg.tokens, "tokens", "admin", "how clients authenticate: admin (the admin token acting as each client) or user (a signed user token per client, checked against the revoked tokens on every request)")
	flag.BoolVar(&cfg.json, "json", false, "print results as JSON")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	var err error
	if cfg.clients, err = parseClients(*clients); err != nil || cfg.iterations < 1 || cfg.maxDuration <= 0 ||
		cfg.heartbeats < 0 || cfg.events < 0 || cfg.runs < 1 || !slices.Contains(scenarios, cfg.scenario) || flag.NArg() != 0 ||
		(cfg.tokens != "admin" && cfg.tokens != "user") {
		fmt.Fprintln(os.Stderr, "usage: coordload [-scenario full|heartbeat|lease] [-clients 1,10,100] [-iterations N>=1] [-runs N>=1] [-max-duration D] [-heartbeats N] [-events N] [-postgres DSN] [-tokens admin|user] [-json]")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "coordload:", err)
			os.Exit(1)
		}
		defer f.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	results, err := run(ctx, cfg, os.Stderr)
	stop()
	pprof.StopCPUProfile() // a no-op without -cpuprofile
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordload:", err)
		os.Exit(1)
	}
	if cfg.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
		return
	}
	printTable(os.Stdout, results)
}

func parseClients(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("clients %q: want numbers from 1 to 1000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Result is one operation's numbers at one level, over all its runs.
type Result struct {
	Store   string `json:"store"`
	Clients int    `json:"clients"`
	Op      string `json:"op"`
	Runs    int    `json:"runs"`
	// Count and Errors are summed over the runs.
	Count     int    `json:"count"`
	Errors    int    `json:"errors"`
	PerSecond Spread `json:"perSecond"`
	P50Ms     Spread `json:"p50Ms"`
	P99Ms     Spread `json:"p99Ms"`
	// Load1 is the 1-minute load average read at the start and end of
	// each run (empty where the system does not tell).
	Load1 Spread `json:"load1"`
	// CPUMsPerOp is the CPU time of the whole process (coordinator, store
	// driver and load generator; PostgreSQL's own processes not included)
	// per operation of the run, over all operations ("all" only; zero
	// where the system does not tell). Unlike throughput it hardly
	// depends on what else the machine runs.
	CPUMsPerOp Spread `json:"cpuMsPerOp"`
}

// Spread is the median and range of one number over several runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return Spread{Median: m, Min: xs[0], Max: xs[len(xs)-1]}
}

// sample is one operation's numbers in one run.
type sample struct {
	count, errors       int
	perSecond, p50, p99 float64
	cpuMsPerOp          float64 // "all" only
}

// Operations measured, in report order.
var ops = []string{"create", "heartbeat", "run", "event", "finish", "release", "all"}

// scenarios are what an iteration can be.
var scenarios = []string{"full", "heartbeat", "lease"}

// loadAverage is the 1-minute load average, if the system tells it.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

func run(ctx context.Context, cfg config, progress io.Writer) ([]Result, error) {
	type target struct {
		name string
		open func(context.Context) (store.Store, error)
	}
	dir, err := os.MkdirTemp("", "coordload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	targets := []target{{"sqlite", func(ctx context.Context) (store.Store, error) {
		return sqlite.Open(ctx, filepath.Join(dir, "coordinator.db"))
	}}}
	if cfg.postgres != "" {
		targets = append(targets, target{"postgres", func(ctx context.Context) (store.Store, error) {
			return postgres.Open(ctx, cfg.postgres)
		}})
	}
	var out []Result
	for _, t := range targets {
		st, err := t.open(ctx)
		if err != nil {
			return out, err
		}
		for _, n := range cfg.clients {
			samples := map[string][]sample{}
			var loads []float64
			for i := range cfg.runs {
				fmt.Fprintf(progress, "coordload: %s, %d clients, run %d/%d...\n", t.name, n, i+1, cfg.runs)
				if l, ok := loadAverage(); ok {
					loads = append(loads, l)
				}
				rs, err := level(ctx, cfg, st, t.name, n)
				if err != nil {
					st.Close()
					return out, err
				}
				if l, ok := loadAverage(); ok {
					loads = append(loads, l)
				}
				for op, smp := range rs {
					samples[op] = append(samples[op], smp)
				}
			}
			out = append(out, summarize(t.name, n, samples, loads)...)
		}
		if err := st.Close(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// summarize turns the runs' samples of one level into results.
func summarize(storeName string, clients int, samples map[string][]sample, loads []float64) []Result {
	var out []Result
	for _, op := range ops {
		ss := samples[op]
		res := Result{Store: storeName, Clients: clients, Op: op, Runs: len(ss), Load1: spread(loads)}
		var rate, p50, p99, cpu []float64
		for _, smp := range ss {
			res.Count += smp.count
			res.Errors += smp.errors
			if smp.count > 0 {
				rate, p50, p99 = append(rate, smp.perSecond), append(p50, smp.p50), append(p99, smp.p99)
			}
			if smp.cpuMsPerOp > 0 {
				cpu = append(cpu, smp.cpuMsPerOp)
			}
		}
		res.CPUMsPerOp = spread(cpu)
		if res.Count == 0 && res.Errors == 0 {
			continue // not part of this scenario
		}
		res.PerSecond, res.P50Ms, res.P99Ms = spread(rate), spread(p50), spread(p99)
		out = append(out, res)
	}
	return out
}

// level runs one store at one number of clients once.
func level(ctx context.Context, cfg config, st store.Store, storeName string, clients int) (map[string]sample, error) {
	const (
		adminToken    = "coordload-admin-token"
		sessionSecret = "coordload-session-secret-0123456789abcdef"
	)
	srv, err := coordinator.New(coordinator.Config{
		Store: st, Providers: map[string]provider.SSHLeaseBackend{fakeName: newFakeBackend()},
		Tokens: auth.Config{AdminToken: adminToken, SessionSecret: sessionSecret, DefaultOrg: "bench"},
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	mctx, stopMaint := context.WithCancel(ctx)
	maint := make(chan error, 1)
	go func() { maint <- srv.Run(mctx) }()
	defer func() {
		stopMaint()
		<-maint
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-served
	}()

	transport := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport}
	base := "http://" + ln.Addr().String()

	cls := make([]*coordclient.Client, clients)
	held := make([]api.Lease, clients) // scenario heartbeat: each client's lease
	for i := range clients {
		owner := fmt.Sprintf("bench-%03d", i)
		opts := []coordclient.Option{coordclient.WithHTTPClient(hc), coordclient.WithCreateRetry(1)}
		token := adminToken
		if cfg.tokens == "user" {
			now := time.Now()
			if token, err = auth.MintUserToken([]byte(sessionSecret), auth.Claims{Owner: owner, Org: "bench", IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
				return nil, err
			}
		} else {
			opts = append(opts, coordclient.WithActAs(owner, "bench"))
		}
		cl, err := coordclient.New(base, token, opts...)
		if err != nil {
			return nil, err
		}
		cls[i] = cl
		if cfg.scenario == "heartbeat" {
			if held[i], err = cl.CreateLease(ctx, api.LeaseRequest{LeaseID: lease.NewID(), Provider: fakeName, SSHPublicKey: fakeKey}); err != nil {
				return nil, fmt.Errorf("create the lease of client %d: %w", i, err)
			}
		}
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.maxDuration)
	defer cancel()
	var remaining atomic.Int64
	remaining.Store(int64(cfg.iterations))
	recs := make([]*recorder, clients)
	var wg sync.WaitGroup
	start := time.Now()
	cpuStart, cpuOK := cpuTime()
	for i, cl := range cls {
		recs[i] = newRecorder()
		wg.Go(func() {
			for remaining.Add(-1) >= 0 && lctx.Err() == nil {
				switch cfg.scenario {
				case "heartbeat":
					heartbeat(lctx, cl, held[i].ID, recs[i])
				case "lease":
					createRelease(lctx, cl, recs[i])
				default:
					iteration(lctx, cfg, cl, recs[i])
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuEnd, cpuOK2 := cpuTime()
	for i, l := range held {
		if l.ID != "" {
			del := true
			if _, err := cls[i].Release(ctx, l.ID, api.ReleaseRequest{Delete: &del}); err != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("release the lease of client %d: %w", i, err)
			}
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	all := newRecorder()
	for _, r := range recs {
		all.merge(r)
	}
	out := map[string]sample{}
	for _, op := range ops {
		ds := all.lat[op]
		smp := sample{count: len(ds), errors: all.errs[op]}
		if len(ds) > 0 {
			slices.Sort(ds)
			smp.perSecond = float64(len(ds)) / elapsed.Seconds()
			smp.p50 = ms(percentile(ds, 0.50))
			smp.p99 = ms(percentile(ds, 0.99))
		}
		if op == "all" && cpuOK && cpuOK2 && len(ds) > 0 {
			smp.cpuMsPerOp = ms(cpuEnd-cpuStart) / float64(len(ds))
		}
		out[op] = smp
	}
	if first := all.firstErr; first != nil {
		fmt.Fprintf(os.Stderr, "coordload: %s, %d clients: first error: %v\n", storeName, clients, first)
	}
	return out, nil
}

// heartbeat is one iteration of scenario heartbeat.
func heartbeat(ctx context.Context, cl *coordclient.Client, id string, r *recorder) {
	r.time("heartbeat", func() error {
		_, err := cl.Heartbeat(ctx, id, api.HeartbeatRequest{ExpectedProvider: fakeName})
		return err
	})
}

// createRelease is one iteration of scenario lease.
func createRelease(ctx context.Context, cl *coordclient.Client, r *recorder) {
	var l api.Lease
	if !r.time("create", func() (err error) {
		l, err = cl.CreateLease(ctx, api.LeaseRequest{LeaseID: lease.NewID(), Provider: fakeName, SSHPublicKey: fakeKey})
		return err
	}) {
		return
	}
	del := true
	r.time("release", func() error {
		_, err := cl.Release(ctx, l.ID, api.ReleaseRequest{Delete: &del, ExpectedProvider: fakeName})
		return err
	})
}

// iteration is one lease's life.
func iteration(ctx context.Context, cfg config, cl *coordclient.Client, r *recorder) {
	id := lease.NewID()
	var l api.Lease
	if !r.time("create", func() (err error) {
		l, err = cl.CreateLease(ctx, api.LeaseRequest{LeaseID: id, Provider: fakeName, SSHPublicKey: fakeKey})
		return err
	}) {
		return
	}
	for range cfg.heartbeats {
		r.time("heartbeat", func() error {
			_, err := cl.Heartbeat(ctx, l.ID, api.HeartbeatRequest{ExpectedProvider: fakeName})
			return err
		})
	}
	var run api.Run
	if r.time("run", func() (err error) {
		run, err = cl.CreateRun(ctx, api.RunRequest{LeaseID: l.ID, Provider: fakeName, Command: []string{"go", "test", "./..."}})
		return err
	}) {
		for i := range cfg.events {
			r.time("event", func() error {
				_, err := cl.AppendEvent(ctx, run.ID, api.EventRequest{Type: api.EventOutput, Stream: api.StreamStdout, Message: "ok  \tpkg/" + strconv.Itoa(i) + "\t0.012s\n"})
				return err
			})
		}
		r.time("finish", func() error {
			_, err := cl.FinishRun(ctx, run.ID, api.FinishRequest{ExitCode: 0, SyncMs: 12, CommandMs: 340, Log: "ok\n"})
			return err
		})
	}
	del := true
	r.time("release", func() error {
		_, err := cl.Release(ctx, l.ID, api.ReleaseRequest{Delete: &del, ExpectedProvider: fakeName})
		return err
	})
}

// recorder collects one client's latencies.
type recorder struct {
	lat      map[string][]time.Duration
	errs     map[string]int
	firstErr error
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, errs: map[string]int{}}
}

// time runs op and records its latency; it reports success. Errors from a
// level's time limit are not counted.
func (r *recorder) time(op string, fn func() error) bool {
	start := time.Now()
	err := fn()
	d := time.Since(start)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return false
		}
		r.errs[op]++
		r.errs["all"]++
		if r.firstErr == nil {
			r.firstErr = fmt.Errorf("%s: %w", op, err)
		}
		return false
	}
	r.lat[op] = append(r.lat[op], d)
	r.lat["all"] = append(r.lat["all"], d)
	return true
}

func (r *recorder) merge(o *recorder) {
	for op, ds := range o.lat {
		r.lat[op] = append(r.lat[op], ds...)
	}
	for op, n := range o.errs {
		r.errs[op] += n
	}
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printTable prints each number as its median and (min-max) over the
// runs.
func printTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tclients\top\truns\tcount\terrors\tops/s\tp50 ms\tp99 ms\tload1\tcpu ms/op\t")
	for _, r := range rs {
		cpu := "-"
		if r.CPUMsPerOp.Median > 0 {
			cpu = r.CPUMsPerOp.format("%.3f")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Store, r.Clients, r.Op, r.Runs, r.Count, r.Errors,
			r.PerSecond.format("%.0f"), r.P50Ms.format("%.2f"), r.P99Ms.format("%.2f"), r.Load1.format("%.1f"), cpu)
	}
	tw.Flush()
}

// format writes the median and the range, like "5100 (4900-5300)".
func (s Spread) format(verb string) string {
	return fmt.Sprintf(verb+" ("+verb+"-"+verb+")", s.Median, s.Min, s.Max)
}
