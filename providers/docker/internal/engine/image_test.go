package engine

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

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
			answerJSON(w, http.StatusOK, `{"Id":"sha256:0123","RepoTags":["crabbox/box:test"],"Config":{"Cmd":["/bin/sh"],"Env":["PATH=/bin"]}}`)
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
	want := Image{ID: "sha256:0123", Config: ImageConfig{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}}}
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
