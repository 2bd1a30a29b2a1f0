package engine

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerList(t *testing.T) {
	var query url.Values
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query()
		answerJSON(w, http.StatusOK, `[{"Id":"c1","Names":["/crabbox-a"],"Image":"busybox","State":"running",
			"Labels":{"crabbox":"true"},"Ports":[{"IP":"127.0.0.1","PrivatePort":2222,"PublicPort":32768,"Type":"tcp"}]}]`)
	}}
	c := f.serve(t, Config{})
	got, err := c.ContainerList(t.Context(), ListOptions{All: true, Labels: []string{"crabbox=true", "lease=cbx_1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Container{{ID: "c1", Names: []string{"/crabbox-a"}, State: StateRunning, Labels: map[string]string{"crabbox": "true"},
		Ports: []Port{{IP: "127.0.0.1", PrivatePort: 2222, PublicPort: 32768, Type: "tcp"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ContainerList (-want +got):\n%s", diff)
	}
	var filters map[string]map[string]bool
	if err := json.Unmarshal([]byte(query.Get("filters")), &filters); err != nil {
		t.Fatalf("filters %q: %v", query.Get("filters"), err)
	}
	wantFilters := map[string]map[string]bool{"label": {"crabbox=true": true, "lease=cbx_1": true}}
	if diff := cmp.Diff(wantFilters, filters); diff != "" {
		t.Errorf("filters (-want +got):\n%s", diff)
	}
	if query.Get("all") != "1" {
		t.Errorf("all = %q, want 1", query.Get("all"))
	}
	if paths, _ := f.requests(); paths[len(paths)-1] != "GET /v1.41/containers/json" {
		t.Errorf("requests %q", paths)
	}
}

func TestContainerCreate(t *testing.T) {
	var name string
	var body map[string]any
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		name = r.URL.Query().Get("name")
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		answerJSON(w, http.StatusCreated, `{"Id":"c1","Warnings":["memory limit ignored"]}`)
	}}
	c := f.serve(t, Config{})
	got, err := c.ContainerCreate(t.Context(), "crabbox-a", ContainerConfig{
		Image: "busybox", Cmd: []string{"agent"}, ExposedPorts: map[string]struct{}{"2222/tcp": {}},
		AttachStdout: true,
		HostConfig: &HostConfig{
			PortBindings: map[string][]PortBinding{"2222/tcp": {{HostIP: "127.0.0.1"}}},
			AutoRemove:   true, Init: new(true), NanoCPUs: 1e9,
			Mounts: []Mount{{Type: "bind", Source: "/agent", Target: "/crabbox/bin/crabbox", ReadOnly: true}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Created{ID: "c1", Warnings: []string{"memory limit ignored"}}, got); diff != "" {
		t.Errorf("ContainerCreate (-want +got):\n%s", diff)
	}
	if name != "crabbox-a" {
		t.Errorf("name = %q", name)
	}
	// The body is what the API reference names, as JSON decodes it.
	want := map[string]any{
		"Image": "busybox", "Cmd": []any{"agent"}, "ExposedPorts": map[string]any{"2222/tcp": map[string]any{}},
		"OpenStdin": false, "StdinOnce": false, "AttachStdin": false, "AttachStdout": true, "AttachStderr": false,
		"HostConfig": map[string]any{
			"PortBindings": map[string]any{"2222/tcp": []any{map[string]any{"HostIp": "127.0.0.1", "HostPort": ""}}},
			"AutoRemove":   true, "Init": true, "NanoCpus": 1e9,
			"Mounts": []any{map[string]any{"Type": "bind", "Source": "/agent", "Target": "/crabbox/bin/crabbox", "ReadOnly": true}},
		},
	}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("create body (-want +got):\n%s", diff)
	}
}

func TestContainerStartRemoveWait(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1.41/containers/c1/start":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodDelete && r.URL.Path == "/v1.41/containers/c1" && r.URL.RawQuery == "force=1&v=1":
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1.41/containers/c1/wait" && r.URL.Query().Get("condition") == "removed":
			answerJSON(w, http.StatusOK, `{"StatusCode":3}`)
		case r.URL.Path == "/v1.41/containers/c2/wait":
			answerJSON(w, http.StatusOK, `{"StatusCode":0,"Error":{"Message":"container vanished"}}`)
		default:
			answerJSON(w, http.StatusBadRequest, `{"message":"unexpected `+r.Method+` `+r.URL.String()+`"}`)
		}
	}}
	c := f.serve(t, Config{})
	ctx := t.Context()
	if err := c.ContainerStart(ctx, "c1"); err != nil {
		t.Error(err)
	}
	if err := c.ContainerRemove(ctx, "c1", RemoveOptions{Force: true, Volumes: true}); err != nil {
		t.Error(err)
	}
	if code, err := c.ContainerWait(ctx, "c1", WaitRemoved); err != nil || code != 3 {
		t.Errorf("ContainerWait = %d, %v; want 3", code, err)
	}
	if _, err := c.ContainerWait(ctx, "c2", WaitRemoved); err == nil || !strings.Contains(err.Error(), "wait for container c2: container vanished") {
		t.Errorf("ContainerWait of a failed wait: err = %v", err)
	}
}

func TestCopyToAndFromContainer(t *testing.T) {
	var stored []byte
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/v1.41/containers/c1/archive":
			if q.Get("path") != "/" || q.Get("noOverwriteDirNonDir") != "true" || r.Header.Get("Content-Type") != "application/x-tar" {
				answerJSON(w, http.StatusBadRequest, `{"message":"bad copy request"}`)
				return
			}
			stored, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodGet && r.URL.Path == "/v1.41/containers/c1/archive" && q.Get("path") == "/etc/motd":
			w.Header().Set("Content-Type", "application/x-tar")
			_, _ = w.Write(stored)
		default:
			answerJSON(w, http.StatusNotFound, `{"message":"Could not find the file `+q.Get("path")+` in container c1"}`)
		}
	}}
	c := f.serve(t, Config{})
	ctx := t.Context()
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/motd", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	if err := c.CopyToContainer(ctx, "c1", "/", bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatal(err)
	}
	rc, err := c.CopyFromContainer(ctx, "c1", "/etc/motd")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, archive.Bytes()) {
		t.Errorf("CopyFromContainer read %d bytes, %v; want the %d copied in", len(got), err, archive.Len())
	}
	_, err = c.CopyFromContainer(ctx, "c1", "/absent")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "copy /absent out of container c1: Could not find the file /absent") {
		t.Errorf("CopyFromContainer of a missing file: err = %v", err)
	}
}

// An ID that is not a container ID or name never reaches the engine: it
// would go into the request's path, where ../ or a slash names something
// else.
func TestContainerIDsAreChecked(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, http.StatusBadRequest, `{"message":"unexpected `+r.Method+` `+r.URL.String()+`"}`)
	}}
	c := f.serve(t, Config{})
	ctx := t.Context()
	for _, id := range []string{"", "..", "../images/x", "c1/start", "c1?force=1", "-c1", "c 1"} {
		errs := []error{c.ContainerStart(ctx, id), c.ContainerRemove(ctx, id, RemoveOptions{})}
		_, err := c.ContainerWait(ctx, id, WaitRemoved)
		errs = append(errs, err, c.CopyToContainer(ctx, id, "/", strings.NewReader("")))
		_, err = c.CopyFromContainer(ctx, id, "/x")
		errs = append(errs, err)
		_, err = c.ContainerAttach(ctx, id, AttachOptions{Stdout: true})
		errs = append(errs, err)
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "is not a container ID or name") {
				t.Errorf("call %d with id %q: err = %v, want it refused", i, id, err)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.paths) != 0 {
		t.Errorf("the engine was asked %q", f.paths)
	}
}
