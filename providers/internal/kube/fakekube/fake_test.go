package fakekube_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/kube/fakekube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, cloudtest.IgnoreGoroutines()...) }

// call sends a JSON request as kubectl does and returns the status, the
// Retry-After header and the body.
func call(t *testing.T, srv *httptest.Server, method, path, contentType, body string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), b
}

func status(t *testing.T, b []byte) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(b, &s); err != nil || s.Kind != "Status" {
		t.Fatalf("body %s is not a Status: %v", b, err)
	}
	return s
}

func pod(name string, labels string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","labels":` + labels + `},
		"spec":{"containers":[{"name":"c","image":"debian:12","resources":{"requests":{"cpu":"2","memory":"4Gi"}}}]}}`
}

// The fake answers as the API server does: 201 with the created object,
// 409 AlreadyExists and 404 NotFound as Status bodies, label selectors,
// pages joined by continue, merge patches of labels, 403 exceeded quota,
// 429 with Retry-After, and dependents deleted with their owner.
func TestFake(t *testing.T) {
	fake := fakekube.New(cloudtest.NewFleet(t), fakekube.Node{Name: "n", InternalIP: "10.0.0.1"})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	const pods = "/api/v1/namespaces/ns/pods"
	for _, name := range []string{"c", "a", "b"} {
		if code, _, b := call(t, srv, "POST", pods, "application/json", pod(name, `{"crabbox":"true"}`)); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, b)
		}
	}
	call(t, srv, "POST", pods, "application/json", pod("other", `{"app":"web"}`))
	code, _, b := call(t, srv, "POST", pods, "application/json", pod("a", `{}`))
	if s := status(t, b); code != http.StatusConflict || s.Reason != metav1.StatusReasonAlreadyExists || s.Code != 409 {
		t.Errorf("second create: %d %+v", code, s)
	}
	var names []string
	path := pods + "?labelSelector=crabbox%3Dtrue&limit=2"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("too many pages")
		}
		_, _, b := call(t, srv, "GET", path, "", "")
		var list corev1.PodList
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		path = ""
		if list.Continue != "" {
			path = pods + "?labelSelector=crabbox%3Dtrue&limit=2&continue=" + list.Continue
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	code, _, b = call(t, srv, "PATCH", pods+"/a", "application/merge-patch+json", `{"metadata":{"labels":{"state":"ready","crabbox":null}}}`)
	var p corev1.Pod
	if err := json.Unmarshal(b, &p); code != http.StatusOK || err != nil || !cmp.Equal(p.Labels, map[string]string{"state": "ready"}) {
		t.Errorf("patch: %d %v %v", code, p.Labels, err)
	}
	if code, _, _ := call(t, srv, "PATCH", pods+"/a", "application/json-patch+json", `[]`); code != http.StatusUnsupportedMediaType {
		t.Errorf("JSON patch: %d, want 415", code)
	}
	code, _, b = call(t, srv, "GET", pods+"/nope", "", "")
	if s := status(t, b); code != http.StatusNotFound || s.Reason != metav1.StatusReasonNotFound {
		t.Errorf("get missing: %d %+v", code, s)
	}
	fake.SetFull(fakekube.Create{Namespace: "ns", CPU: "2", Memory: "4Gi"})
	code, _, b = call(t, srv, "POST", pods, "application/json", pod("d", `{}`))
	if s := status(t, b); code != http.StatusForbidden || !strings.Contains(s.Message, "exceeded quota") {
		t.Errorf("create over quota: %d %+v", code, s)
	}
	fake.Throttle(1, "3")
	code, retry, b := call(t, srv, "GET", pods, "", "")
	if s := status(t, b); code != http.StatusTooManyRequests || retry != "3" || s.Reason != metav1.StatusReasonTooManyRequests {
		t.Errorf("throttled: %d Retry-After %q %+v", code, retry, s)
	}

	// A Service owned by pod b goes with it.
	_, _, b = call(t, srv, "GET", pods+"/b", "", "")
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	svc := `{"metadata":{"name":"b","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"b","uid":"` + string(p.UID) + `"}]},
		"spec":{"type":"NodePort","selector":{"crabbox":"true"},"ports":[{"port":2222,"targetPort":2222}]}}`
	code, _, b = call(t, srv, "POST", "/api/v1/namespaces/ns/services", "application/json", svc)
	var s corev1.Service
	if err := json.Unmarshal(b, &s); code != http.StatusCreated || err != nil || s.Spec.Ports[0].NodePort < 30000 {
		t.Errorf("create service: %d %+v %v", code, s.Spec, err)
	}
	if code, _, _ := call(t, srv, "DELETE", pods+"/b", "", ""); code != http.StatusOK {
		t.Errorf("delete pod: %d", code)
	}
	if svcs := fake.Services(); len(svcs) != 0 {
		t.Errorf("services left after their owner's deletion: %+v", svcs)
	}
	code, _, b = call(t, srv, "GET", "/api/v1/nodes/n", "", "")
	var n corev1.Node
	if err := json.Unmarshal(b, &n); code != http.StatusOK || err != nil || len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "10.0.0.1" {
		t.Errorf("node: %d %+v %v", code, n.Status, err)
	}
}
