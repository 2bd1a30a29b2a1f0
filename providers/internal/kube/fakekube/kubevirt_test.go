package fakekube_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/kube/fakekube"
)

func vmi(name, labels string) string {
	return `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"` + name + `","labels":` + labels + `},
		"spec":{"domain":{"resources":{"requests":{"cpu":"2","memory":"4Gi"}},"devices":{}},
		"volumes":[{"name":"d","containerDisk":{"image":"quay.io/containerdisks/debian:12"}},
		{"name":"c","cloudInitNoCloud":{"secretRef":{"name":"` + name + `"}}}]}}`
}

// The VMI paths answer as KubeVirt's API does: the group's resource list,
// 201 with the created VMI, 422 for a VMI without its disks, 404 and
// 409 as Status bodies, label selectors with limit/continue pages, a
// merge patch of labels; a VMI whose cloud-init Secret is missing does
// not run, and without KubeVirt the group is 404.
func TestVMIs(t *testing.T) {
	fleet := cloudtest.NewFleet(t)
	fake := fakekube.New(fleet, fakekube.Node{Name: "n", InternalIP: "10.0.0.1"})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	const base = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances"
	if code, _, b := call(t, srv, http.MethodGet, "/apis/kubevirt.io/v1", "", ""); code != http.StatusOK || !json.Valid(b) {
		t.Errorf("group: %d %s", code, b)
	}
	for _, name := range []string{"a", "b", "c"} {
		if code, _, b := call(t, srv, http.MethodPost, base, "application/json", vmi(name, `{"crabbox":"true"}`)); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, b)
		}
	}
	if code, _, b := call(t, srv, http.MethodPost, base, "application/json", vmi("a", `{}`)); code != http.StatusConflict || status(t, b).Reason != "AlreadyExists" {
		t.Errorf("create again: %d %s", code, b)
	}
	bad := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"x"},"spec":{"domain":{"devices":{}}}}`
	if code, _, b := call(t, srv, http.MethodPost, base, "application/json", bad); code != http.StatusUnprocessableEntity {
		t.Errorf("create without disks: %d %s", code, b)
	}
	if code, _, b := call(t, srv, http.MethodGet, base+"/nope", "", ""); code != http.StatusNotFound || status(t, b).Code != 404 {
		t.Errorf("get missing: %d %s", code, b)
	}
	var names []string
	next := ""
	for {
		code, _, b := call(t, srv, http.MethodGet, base+"?labelSelector=crabbox%3Dtrue&limit=2&continue="+next, "", "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, b)
		}
		var list unstructured.UnstructuredList
		if err := list.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			names = append(names, it.GetName())
		}
		if next = list.GetContinue(); next == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	if code, _, b := call(t, srv, http.MethodPatch, base+"/a", "application/merge-patch+json", `{"metadata":{"labels":{"state":"ready","crabbox":null}}}`); code != http.StatusOK {
		t.Errorf("patch: %d %s", code, b)
	}
	for _, v := range fake.VMIs() {
		phase, _, _ := unstructured.NestedString(v.Object, "status", "phase")
		if phase == fakekube.PhaseRunning {
			t.Errorf("VMI %s runs without its cloud-init Secret", v.GetName())
		}
		if v.GetName() == "a" {
			if diff := cmp.Diff(map[string]string{"state": "ready"}, v.GetLabels()); diff != "" {
				t.Errorf("patched labels (-want +got):\n%s", diff)
			}
		}
	}
	if code, _, b := call(t, srv, http.MethodDelete, base+"/a", "", ""); code != http.StatusOK {
		t.Errorf("delete: %d %s", code, b)
	}
	if n := len(fake.VMIs()); n != 2 {
		t.Errorf("%d VMIs after a delete, want 2", n)
	}
	fake.SetNoKubeVirt()
	if code, _, _ := call(t, srv, http.MethodGet, "/apis/kubevirt.io/v1", "", ""); code != http.StatusNotFound {
		t.Errorf("group without KubeVirt: %d, want 404", code)
	}
}
