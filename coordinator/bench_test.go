package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

// benchEnv is a coordinator on a SQLite file with the fake provider,
// called in-process (no sockets) so the numbers are the handler and store.
func benchEnv(b *testing.B) *env {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return newEnv(b, st, clockwork.NewFakeClockAt(start), newFake())
}

func serve(b *testing.B, e *env, method, path, token string, body []byte, want int) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	if rec.Code != want {
		b.Errorf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
}

// BenchmarkHeartbeat measures heartbeats of one lease (DESIGN: thousands
// per second on one core with SQLite).
func BenchmarkHeartbeat(b *testing.B) {
	e := benchEnv(b)
	tok := e.token("alice", "acme")
	body, _ := json.Marshal(leaseReq(b))
	serve(b, e, "POST", "/v1/leases", tok, body, http.StatusCreated)
	var req api.LeaseRequest
	_ = json.Unmarshal(body, &req)
	path := leasePath(req.LeaseID, "/heartbeat")
	b.ResetTimer()
	for b.Loop() {
		serve(b, e, "POST", path, tok, nil, http.StatusOK)
	}
}

// BenchmarkCreateLease measures lease creates with the fake provider,
// from many goroutines at once.
func BenchmarkCreateLease(b *testing.B) {
	e := benchEnv(b)
	tok := e.token("alice", "acme")
	b.SetParallelism(50) // 100 concurrent clients on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body, _ := json.Marshal(leaseReq(b))
			serve(b, e, "POST", "/v1/leases", tok, body, http.StatusCreated)
		}
	})
}
