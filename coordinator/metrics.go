package coordinator

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// scrapeTimeout bounds the store query behind the active lease gauge.
const scrapeTimeout = 5 * time.Second

// metrics are one Server's Prometheus metrics, in its own registry.
type metrics struct {
	registry          *prometheus.Registry
	requests          *prometheus.CounterVec
	latency           *prometheus.HistogramVec
	provisionFailures *prometheus.CounterVec
	touchFailures     *prometheus.CounterVec
	cleanups          *prometheus.CounterVec
	cleanupFailures   *prometheus.CounterVec
	sshLogins         *prometheus.CounterVec
	sshLoginFailures  *prometheus.CounterVec
	// Ready pools, by pool key (counted by this process).
	poolTakes            *prometheus.CounterVec
	poolMisses           *prometheus.CounterVec
	poolHandoverFailures *prometheus.CounterVec
	poolRefillFailures   *prometheus.CounterVec
	// shareChanges counts changes of lease shares, by change (put,
	// delete).
	shareChanges *prometheus.CounterVec
	handler      http.Handler
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_http_requests_total",
			Help: "HTTP requests served, by method, route and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "crabbox_coordinator_http_request_duration_seconds",
			Help:    "HTTP request latency, by method and route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"method", "route"}),
		provisionFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_provision_failures_total",
			Help: "Provider Acquire calls that failed, by provider.",
		}, []string{"provider"}),
		touchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_touch_failures_total",
			Help: "Provider Touch calls after a heartbeat that failed, by provider.",
		}, []string{"provider"}),
		cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_cleanups_total",
			Help: "Lease cleanups committed by the maintenance loop, by provider.",
		}, []string{"provider"}),
		cleanupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_cleanup_failures_total",
			Help: "Server deletions by the maintenance loop that failed, by provider.",
		}, []string{"provider"}),
		sshLogins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ssh_logins_total",
			Help: "SSH logins issued by providers whose logins are credentials, by provider.",
		}, []string{"provider"}),
		sshLoginFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ssh_login_failures_total",
			Help: "SSH logins a provider could not issue for a lease answer, by provider.",
		}, []string{"provider"}),
		poolTakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ready_pool_takes_total",
			Help: "Ready pool boxes handed to a create, by pool.",
		}, []string{"pool"}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ready_pool_misses_total",
			Help: "Creates that named or matched a ready pool and found no box to take, by pool.",
		}, []string{"pool"}),
		poolHandoverFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ready_pool_handover_failures_total",
			Help: "Ready pool boxes deleted because their handover to a new owner failed, by pool.",
		}, []string{"pool"}),
		poolRefillFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_ready_pool_refill_failures_total",
			Help: "Ready pool maintenance passes that failed (a box not made, a limit reached), by pool.",
		}, []string{"pool"}),
		shareChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crabbox_coordinator_lease_share_changes_total",
			Help: "Changes of lease shares, by change (put, delete).",
		}, []string{"change"}),
	}
	m.registry.MustRegister(m.requests, m.latency, m.provisionFailures, m.touchFailures,
		m.cleanups, m.cleanupFailures, m.sshLogins, m.sshLoginFailures,
		m.poolTakes, m.poolMisses, m.poolHandoverFailures, m.poolRefillFailures, m.shareChanges,
		&leaseCollector{s: s}, &poolCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorLog: slogAdapter{s.log}})
	return m
}

func (m *metrics) observe(method, route string, code int, elapsed time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(method, route).Observe(elapsed.Seconds())
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// leaseCollector reports the leases holding capacity, read from the store
// at scrape time so several coordinators sharing a store agree.
type leaseCollector struct{ s *Server }

var activeLeasesDesc = prometheus.NewDesc("crabbox_coordinator_active_leases",
	"Managed leases holding capacity (live, or their server deletion not yet finished).", nil, nil)

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeLeasesDesc }

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	now := c.s.clock.Now().UTC()
	u, err := c.s.store.Usage(ctx, store.UsageQuery{Month: now, Now: now})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeLeasesDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(activeLeasesDesc, prometheus.GaugeValue, float64(u.Total.ActiveLeases))
}

// slogAdapter lets promhttp log its errors through slog.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Println(v ...any) { a.log.Warn("metrics", slog.Any("error", v)) }

// poolCollector reports each ready pool's boxes and target, read from the
// store at scrape time.
type poolCollector struct{ s *Server }

var (
	poolReadyDesc = prometheus.NewDesc("crabbox_coordinator_ready_pool_ready",
		"Ready boxes of a ready pool.", []string{"pool", "provider"}, nil)
	poolProvisioningDesc = prometheus.NewDesc("crabbox_coordinator_ready_pool_provisioning",
		"Boxes of a ready pool being made.", []string{"pool", "provider"}, nil)
	poolTargetDesc = prometheus.NewDesc("crabbox_coordinator_ready_pool_target",
		"A ready pool's target now (its schedule applied).", []string{"pool", "provider"}, nil)
	poolTakenDesc = prometheus.NewDesc("crabbox_coordinator_ready_pool_taken",
		"Boxes handed out from a ready pool since it was made (all coordinators).", []string{"pool", "provider"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolReadyDesc
	ch <- poolProvisioningDesc
	ch <- poolTargetDesc
	ch <- poolTakenDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	pools, err := c.s.store.ListPools(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(poolReadyDesc, err)
		return
	}
	now := c.s.clock.Now().UTC()
	for _, p := range pools {
		counts, err := c.s.store.PoolCounts(ctx, p.Key, now)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(poolReadyDesc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(counts.Ready), p.Key, p.Provider)
		ch <- prometheus.MustNewConstMetric(poolProvisioningDesc, prometheus.GaugeValue, float64(counts.Provisioning), p.Key, p.Provider)
		ch <- prometheus.MustNewConstMetric(poolTargetDesc, prometheus.GaugeValue, float64(p.TargetAt(now)), p.Key, p.Provider)
		ch <- prometheus.MustNewConstMetric(poolTakenDesc, prometheus.GaugeValue, float64(p.TakenTotal), p.Key, p.Provider)
	}
}
