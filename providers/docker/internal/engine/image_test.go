package engine

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestImageImport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stream  string // the engine's progress
		wantID  string
		wantErr string
	}{
		{name: "imported", stream: `{"status":"sha256:0123abcd"}` + "\n", wantID: "sha256:0123abcd"},
		{name: "error in the stream", stream: `{"status":"Importing"}` + "\n" + `{"errorDetail":{"message":"archive/tar: invalid tar header"},"error":"archive/tar: invalid tar header"}` + "\n",
			wantErr: "import image crabbox/box:test: archive/tar: invalid tar header"},
		{name: "old-style error", stream: `{"error":"no space left on device"}`, wantErr: "import image crabbox/box:test: no space left on device"},
		{name: "no ID", stream: `{"status":"Importing"}`, wantErr: "the engine reported no image ID"},
		{name: "garbled", stream: `{"status":`, wantErr: "import image crabbox/box:test: the engine's progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var query url.Values
			var body string
			f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1.41/images/create" {
					answerJSON(w, http.StatusBadRequest, `{"message":"unexpected request"}`)
					return
				}
				query = r.URL.Query()
				b, _ := io.ReadAll(r.Body)
				body = string(b)
				answerJSON(w, http.StatusOK, tc.stream)
			}}
			c := f.serve(t, Config{})
			id, err := c.ImageImport(t.Context(), strings.NewReader("a tar stream"), "crabbox/box:test",
				ImportOptions{Message: "a box", Changes: []string{"ENV PATH=/bin", `CMD ["/bin/sh"]`}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ImageImport: id %q, err = %v, want one containing %q", id, err, tc.wantErr)
				}
			} else if err != nil || id != tc.wantID {
				t.Fatalf("ImageImport = %q, %v; want %q", id, err, tc.wantID)
			}
			want := url.Values{"fromSrc": {"-"}, "repo": {"crabbox/box:test"}, "message": {"a box"}, "changes": {"ENV PATH=/bin", `CMD ["/bin/sh"]`}}
			if diff := cmp.Diff(want, query); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
			if body != "a tar stream" {
				t.Errorf("body %q", body)
			}
		})
	}
}

func TestImageInspectAndRemove(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1.41/images/crabbox/box:test/json":
			answerJSON(w, http.StatusOK, `{"Id":"sha256:0123","RepoTags":["crabbox/box:test"],"Created":"2026-12-07T03:11:49.123456789Z","Size":1982291,
				"Config":{"Cmd":["/bin/sh"],"Env":["PATH=/bin"],"Labels":{"crabbox":"true"}}}`)
		case r.Method == http.MethodDelete && r.URL.Path == "/v1.41/images/crabbox/box:test" && r.URL.RawQuery == "force=1&noprune=1":
			answerJSON(w, http.StatusOK, `[{"Untagged":"crabbox/box:test"}]`)
		default:
			answerJSON(w, http.StatusNotFound, `{"message":"No such image: `+strings.TrimPrefix(r.URL.Path, "/v1.41/images/")+`"}`)
		}
	}}
	c := f.serve(t, Config{})
	img, err := c.ImageInspect(t.Context(), "crabbox/box:test")
	if err != nil {
		t.Fatal(err)
	}
	want := Image{
		ID: "sha256:0123", RepoTags: []string{"crabbox/box:test"}, Created: time.Date(2026, 12, 7, 3, 11, 49, 123456789, time.UTC), Size: 1982291,
		Config: ImageConfig{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Labels: map[string]string{"crabbox": "true"}},
	}
	if diff := cmp.Diff(want, img); diff != "" {
		t.Errorf("ImageInspect (-want +got):\n%s", diff)
	}
	if err := c.ImageRemove(t.Context(), "crabbox/box:test", ImageRemoveOptions{Force: true}); err != nil {
		t.Error(err)
	}
	_, err = c.ImageInspect(t.Context(), "absent:1")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "inspect image absent:1: No such image") {
		t.Errorf("ImageInspect of a missing image: err = %v", err)
	}
}

func TestImageList(t *testing.T) {
	var query url.Values
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1.41/images/json" {
			answerJSON(w, http.StatusBadRequest, `{"message":"unexpected request"}`)
			return
		}
		query = r.URL.Query()
		answerJSON(w, http.StatusOK, `[{"Containers":-1,"Created":1796613109,"Id":"sha256:4850","Labels":{"checkpoint":"ckp_1"},
			"ParentId":"sha256:867e","RepoDigests":null,"RepoTags":["crabbox/checkpoint:ckp_1"],"SharedSize":-1,"Size":1982291,"VirtualSize":1982291}]`)
	}}
	c := f.serve(t, Config{})
	got, err := c.ImageList(t.Context(), ImageListOptions{Labels: []string{"crabbox=true", "checkpoint"}, Dangling: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	want := []ImageSummary{{ID: "sha256:4850", RepoTags: []string{"crabbox/checkpoint:ckp_1"}, Created: 1796613109, Size: 1982291,
		Labels: map[string]string{"checkpoint": "ckp_1"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ImageList (-want +got):\n%s", diff)
	}
	var filters map[string]map[string]bool
	if err := json.Unmarshal([]byte(query.Get("filters")), &filters); err != nil {
		t.Fatalf("filters %q: %v", query.Get("filters"), err)
	}
	wantFilters := map[string]map[string]bool{"label": {"crabbox=true": true, "checkpoint": true}, "dangling": {"false": true}}
	if diff := cmp.Diff(wantFilters, filters); diff != "" {
		t.Errorf("filters (-want +got):\n%s", diff)
	}

	// No options: no filters.
	if _, err := c.ImageList(t.Context(), ImageListOptions{}); err != nil {
		t.Fatal(err)
	}
	if query.Has("filters") {
		t.Errorf("filters %q without options", query.Get("filters"))
	}
}

func TestContainerCommit(t *testing.T) {
	var query url.Values
	var body map[string]any
	answer := `{"Id":"sha256:4850"}`
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1.41/commit" {
			answerJSON(w, http.StatusBadRequest, `{"message":"unexpected request"}`)
			return
		}
		query = r.URL.Query()
		body = nil
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		if query.Get("container") == "gone" {
			answerJSON(w, http.StatusNotFound, `{"message":"No such container: gone"}`)
			return
		}
		answerJSON(w, http.StatusCreated, answer)
	}}
	c := f.serve(t, Config{})
	id, err := c.ContainerCommit(t.Context(), "c1", CommitOptions{
		Repo: "crabbox/checkpoint", Tag: "ckp_1", Comment: "a checkpoint", Pause: true, Labels: map[string]string{"checkpoint": "ckp_1", "lease": ""},
	})
	if err != nil || id != "sha256:4850" {
		t.Fatalf("ContainerCommit = %q, %v; want sha256:4850", id, err)
	}
	wantQuery := url.Values{"container": {"c1"}, "repo": {"crabbox/checkpoint"}, "tag": {"ckp_1"}, "comment": {"a checkpoint"}, "pause": {"true"}}
	if diff := cmp.Diff(wantQuery, query); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	wantBody := map[string]any{"Labels": map[string]any{"checkpoint": "ckp_1", "lease": ""}}
	if diff := cmp.Diff(wantBody, body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}

	if _, err := c.ContainerCommit(t.Context(), "gone", CommitOptions{}); !IsNotFound(err) || !strings.Contains(err.Error(), "commit container gone: No such container: gone") {
		t.Errorf("ContainerCommit of a missing container: err = %v", err)
	}
	if query.Get("pause") != "false" {
		t.Errorf("pause = %q without Pause, want false (the engine pauses by default)", query.Get("pause"))
	}
	answer = `{}`
	if _, err := c.ContainerCommit(t.Context(), "c1", CommitOptions{}); err == nil || !strings.Contains(err.Error(), "no image ID") {
		t.Errorf("ContainerCommit answered without an ID: err = %v", err)
	}
}

func TestContainerRename(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1.41/containers/c1/rename" && r.URL.Query().Get("name") == "crabbox-a":
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1.41/containers/c2/rename":
			answerJSON(w, http.StatusConflict, `{"message":"Conflict. The container name \"/crabbox-a\" is already in use"}`)
		default:
			answerJSON(w, http.StatusBadRequest, `{"message":"unexpected request"}`)
		}
	}}
	c := f.serve(t, Config{})
	if err := c.ContainerRename(t.Context(), "c1", "crabbox-a"); err != nil {
		t.Error(err)
	}
	if err := c.ContainerRename(t.Context(), "c2", "crabbox-a"); !IsConflict(err) || !strings.Contains(err.Error(), "rename container c2 to crabbox-a: Conflict") {
		t.Errorf("ContainerRename to a name in use: err = %v", err)
	}
}

// A ref that is not an image name or ID never reaches the engine, nor a
// commit of something that is not a container.
func TestImageRefsAreChecked(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, http.StatusBadRequest, `{"message":"unexpected `+r.Method+` `+r.URL.String()+`"}`)
	}}
	c := f.serve(t, Config{})
	ctx := t.Context()
	for _, ref := range []string{"", "..", "../containers/x", "a/../b", "a//b", "/a", "a/", "x?force=1", "a b", "-x", "x#y"} {
		_, err := c.ImageInspect(ctx, ref)
		errs := []error{err, c.ImageRemove(ctx, ref, ImageRemoveOptions{})}
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "is not an image name or ID") {
				t.Errorf("call %d with ref %q: err = %v, want it refused", i, ref, err)
			}
		}
	}
	for _, id := range []string{"", "../x", "c1/start"} {
		if _, err := c.ContainerCommit(ctx, id, CommitOptions{}); err == nil || !strings.Contains(err.Error(), "is not a container ID or name") {
			t.Errorf("ContainerCommit of %q: err = %v, want it refused", id, err)
		}
		if err := c.ContainerRename(ctx, id, "x"); err == nil || !strings.Contains(err.Error(), "is not a container ID or name") {
			t.Errorf("ContainerRename of %q: err = %v, want it refused", id, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.paths) != 0 {
		t.Errorf("the engine was asked %q", f.paths)
	}
}
