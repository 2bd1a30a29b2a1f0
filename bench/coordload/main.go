// Command coordload measures the coordinator under load: lease create,
// heartbeat and release, and run create, events and finish, from 1, 10 and
// 100 concurrent clients against an in-process coordinator with a fake
// provider, reporting throughput and p50/p99 latency per operation.
//
//	go run ./bench/coordload [-clients 1,10,100] [-iterations 500] [-max-duration 60s]
//	    [-postgres DSN] [-json] [-cpuprofile FILE]
//
// Each iteration of a client is one lease's life: create, -heartbeats
// heartbeats, a run with -events events and its finish, and release. A
// level stops after -iterations iterations in all or -max-duration,
// whichever comes first. SQLite runs in a fresh temporary database; with
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
	clients     []int
	iterations  int
	maxDuration time.Duration
	heartbeats  int
	events      int
	postgres    string
	json        bool
}

func main() {
	var cfg config
	clients := flag.String("clients", "1,10,100", "comma-separated numbers of concurrent clients, one level each")
	flag.IntVar(&cfg.iterations, "iterations", 500, "lease lifetimes per level, over all clients")
	flag.DurationVar(&cfg.maxDuration, "max-duration", time.Minute, "time limit per level")
	flag.IntVar(&cfg.heartbeats, "heartbeats", 5, "heartbeats per lease")
	flag.IntVar(&cfg.events, "events", 5, "run events per lease")
	flag.StringVar(&cfg.postgres, "postgres", os.Getenv("CRABBOX_BENCH_POSTGRES"), "PostgreSQL DSN to measure too (default $CRABBOX_BENCH_POSTGRES; prefer the variable: a password in a flag shows in the process list)")
	flag.BoolVar(&cfg.json, "json", false, "print results as JSON")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	var err error
	if cfg.clients, err = parseClients(*clients); err != nil || cfg.iterations < 1 || cfg.maxDuration <= 0 ||
		cfg.heartbeats < 0 || cfg.events < 0 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: coordload [-clients 1,10,100] [-iterations N>=1] [-max-duration D] [-heartbeats N] [-events N] [-postgres DSN] [-json]")
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

// Result is one operation's numbers at one level.
type Result struct {
	Store      string  `json:"store"`
	Clients    int     `json:"clients"`
	Op         string  `json:"op"`
	Count      int     `json:"count"`
	Errors     int     `json:"errors"`
	PerSecond  float64 `json:"perSecond"`
	P50Ms      float64 `json:"p50Ms"`
	P99Ms      float64 `json:"p99Ms"`
	ElapsedSec float64 `json:"elapsedSec"`
}

// Operations measured, in report order.
var ops = []string{"create", "heartbeat", "run", "event", "finish", "release", "all"}

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
			fmt.Fprintf(progress, "coordload: %s, %d clients...\n", t.name, n)
			rs, err := level(ctx, cfg, st, t.name, n)
			out = append(out, rs...)
			if err != nil {
				st.Close()
				return out, err
			}
		}
		if err := st.Close(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// level runs one store at one number of clients.
func level(ctx context.Context, cfg config, st store.Store, storeName string, clients int) ([]Result, error) {
	const adminToken = "coordload-admin-token"
	srv, err := coordinator.New(coordinator.Config{
		Store: st, Providers: map[string]provider.SSHLeaseBackend{fakeName: newFakeBackend()},
		Tokens: auth.Config{AdminToken: adminToken, DefaultOrg: "bench"},
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

	lctx, cancel := context.WithTimeout(ctx, cfg.maxDuration)
	defer cancel()
	var remaining atomic.Int64
	remaining.Store(int64(cfg.iterations))
	recs := make([]*recorder, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		cl, err := coordclient.New(base, adminToken, coordclient.WithHTTPClient(hc),
			coordclient.WithActAs(fmt.Sprintf("bench-%03d", i), "bench"), coordclient.WithCreateRetry(1))
		if err != nil {
			return nil, err
		}
		recs[i] = newRecorder()
		wg.Add(1)
		go func(r *recorder) {
			defer wg.Done()
			for remaining.Add(-1) >= 0 && lctx.Err() == nil {
				iteration(lctx, cfg, cl, r)
			}
		}(recs[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	all := newRecorder()
	for _, r := range recs {
		all.merge(r)
	}
	var out []Result
	for _, op := range ops {
		ds := all.lat[op]
		res := Result{Store: storeName, Clients: clients, Op: op, Count: len(ds), Errors: all.errs[op], ElapsedSec: elapsed.Seconds()}
		if len(ds) > 0 {
			slices.Sort(ds)
			res.PerSecond = float64(len(ds)) / elapsed.Seconds()
			res.P50Ms = ms(percentile(ds, 0.50))
			res.P99Ms = ms(percentile(ds, 0.99))
		}
		out = append(out, res)
	}
	if first := all.firstErr; first != nil {
		fmt.Fprintf(os.Stderr, "coordload: %s, %d clients: first error: %v\n", storeName, clients, first)
	}
	return out, nil
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

func printTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tclients\top\tcount\terrors\tops/s\tp50 ms\tp99 ms\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t\n", r.Store, r.Clients, r.Op, r.Count, r.Errors, r.PerSecond, r.P50Ms, r.P99Ms)
	}
	tw.Flush()
}
