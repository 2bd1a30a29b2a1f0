package external_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// Variables the tests give the fake program (through Config.Env).
const (
	fakeLogEnv = "FAKE_LOG" // file the fake appends every request to, one JSON line each
	fakePIDEnv = "FAKE_PID" // file the "hang" fake writes its child's pid to
)

// fakeProgram is the test binary acting as a provider program: it answers
// the request on stdin in the way mode says.
func fakeProgram(mode string) int {
	if mode == "sleeper" {
		block()
	}
	var req external.Request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "fake: bad request:", err)
		return 2
	}
	if path := os.Getenv(fakeLogEnv); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err == nil {
			_ = json.NewEncoder(f).Encode(req)
			f.Close()
		}
	}
	out := json.NewEncoder(os.Stdout)
	reply := func(r external.Response) int {
		r.ProtocolVersion = external.ProtocolVersion
		_ = out.Encode(r)
		return 0
	}
	good := func() *external.Lease {
		d := req.Desired
		return &external.Lease{
			LeaseID: d.LeaseID, Slug: d.Slug, Name: d.Name, CloudID: "fake-1", Labels: d.Labels,
			SSH: &external.SSH{User: "crabbox", Host: "127.0.0.1", Port: 2222},
		}
	}
	if req.Operation == external.OpRelease {
		return reply(external.Response{})
	}
	switch mode {
	case "wrong-lease-id":
		l := good()
		l.LeaseID = "cbx_ffffffffffff"
		return reply(external.Response{Lease: l})
	case "no-host":
		l := good()
		l.SSH.Host = ""
		return reply(external.Response{Lease: l})
	case "reserved-label":
		l := good()
		l.Labels = map[string]string{"lease": "cbx_000000000000"}
		return reply(external.Response{Lease: l})
	case "oversize":
		chunk := strings.Repeat(" ", 64<<10)
		for {
			if _, err := os.Stdout.WriteString(chunk); err != nil {
				return 1
			}
		}
	case "exit":
		fmt.Fprintln(os.Stderr, "fake: the region is full")
		_ = out.Encode(external.Response{ProtocolVersion: 1, Error: "no capacity in region", ErrorKind: "capacity"})
		return 3
	case "hang":
		exe, _ := os.Executable()
		child := exec.Command(exe)
		child.Env = append(os.Environ(), fakeEnv+"=sleeper")
		child.Stdout = os.Stdout // holds our stdout open until it dies
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		_ = os.WriteFile(os.Getenv(fakePIDEnv), []byte(strconv.Itoa(child.Process.Pid)), 0o600)
		fmt.Fprintln(os.Stderr, "fake: thinking")
		block()
	case "badjson":
		fmt.Print(`{"protocolVersion":1,"lease":{"leaseId":`)
		return 0
	case "twojson":
		fmt.Print(`{"protocolVersion":1} {"protocolVersion":1}`)
		return 0
	case "version":
		fmt.Print(`{"protocolVersion":2}`)
		return 0
	case "wrongtype":
		fmt.Print(`{"protocolVersion":1,"lease":{"leaseId":"cbx_0123456789ab","ssh":{"port":"22"}}}`)
		return 0
	case "env":
		if req.Operation == external.OpCapabilities {
			return reply(external.Response{Capabilities: &external.Capabilities{}})
		}
		var names []string
		for _, kv := range os.Environ() {
			names = append(names, strings.SplitN(kv, "=", 2)[0])
		}
		sort.Strings(names)
		msg, _ := json.Marshal(map[string]any{"env": names, "args": os.Args[1:], "config": req.Config})
		return reply(external.Response{Message: string(msg)})
	case "cleanup":
		// Two expired leases and one live one, then a kept expired one and
		// a kept live one; no cleanup capability.
		if req.Operation == external.OpCapabilities {
			return reply(external.Response{Capabilities: &external.Capabilities{}})
		}
		past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		var leases []external.Lease
		for i, exp := range []time.Time{past, past, future, past, future} {
			id := fmt.Sprintf("cbx_00000000000%d", i)
			l := external.Lease{
				LeaseID: id, Slug: fmt.Sprintf("crab-%d", i), ExpiresAt: exp,
				SSH: &external.SSH{User: "crabbox", Host: "127.0.0.1", Port: 2222},
			}
			if i >= 3 {
				l.Labels = map[string]string{"keep": "true"}
			}
			leases = append(leases, l)
		}
		return reply(external.Response{Leases: leases})
	case "norun":
		return reply(external.Response{Capabilities: &external.Capabilities{}})
	case "run", "run-no-exit", "run-bad-line", "run-error":
		return fakeRun(mode, req, out, reply)
	case "files", "files-no-chunk", "files-oversize", "files-stuck":
		return fakeFiles(mode, req, out, reply)
	case "checkpoint", "checkpoint-wrong-id", "checkpoint-no-artifact":
		return fakeCheckpoint(mode, req, good, reply)
	}
	fmt.Fprintf(os.Stderr, "fake: unknown mode %q\n", mode)
	return 2
}

// fakeRun is a delegated-run program without boxes.
func fakeRun(mode string, req external.Request, out *json.Encoder, reply func(external.Response) int) int {
	switch req.Operation {
	case external.OpCapabilities:
		return reply(external.Response{Capabilities: &external.Capabilities{Run: true}})
	case external.OpAcquire:
		d := req.Desired
		return reply(external.Response{Lease: &external.Lease{LeaseID: d.LeaseID, Slug: d.Slug, CloudID: "sandbox-1", Labels: d.Labels}})
	case external.OpResolve:
		return reply(external.Response{Lease: &external.Lease{LeaseID: req.ID, Slug: "fake-sandbox", CloudID: "sandbox-1"}})
	case external.OpRun:
		_ = out.Encode(external.RunEvent{Stream: "stdout", Data: "hello "})
		_ = out.Encode(external.RunEvent{Stream: "stderr", Data: "warning\n"})
		_ = out.Encode(external.RunEvent{Stream: "stdout", Data: strings.Join(req.Command, " ") + "\n"})
		switch mode {
		case "run-no-exit":
			return 0
		case "run-bad-line":
			fmt.Println(`{"stream":"stdin","data":"x"}`)
			return 0
		case "run-error":
			_ = out.Encode(external.RunEvent{Error: "sandbox vanished"})
			return 1
		}
		code := 7
		_ = out.Encode(external.RunEvent{ExitCode: &code})
		return 0
	}
	return reply(external.Response{Error: "unsupported operation " + req.Operation})
}

// fakeContent is what the files fakes' read-file returns for every path
// but /missing: 1.5 chunks, so that reading it takes two calls.
var fakeContent = strings.Repeat("crab", external.MaxFileChunk*3/8)

// fakeFiles is a delegated-run program with files and no sandbox: write-file
// succeeds (the request log is what tests look at), read-file answers from
// fakeContent in the way mode says.
func fakeFiles(mode string, req external.Request, out *json.Encoder, reply func(external.Response) int) int {
	switch req.Operation {
	case external.OpCapabilities:
		return reply(external.Response{Capabilities: &external.Capabilities{Run: true, Files: true}})
	case external.OpWriteFile:
		return reply(external.Response{})
	case external.OpReadFile:
		f := req.File
		if f.Path == "/missing" {
			return reply(external.Response{Error: "no such file " + f.Path, ErrorKind: "not-found"})
		}
		switch mode {
		case "files-no-chunk":
			return reply(external.Response{})
		case "files-oversize":
			return reply(external.Response{File: &external.FileChunk{Data: make([]byte, f.Length+1)}})
		case "files-stuck":
			return reply(external.Response{File: &external.FileChunk{}})
		}
		end := min(int(f.Offset)+f.Length, len(fakeContent))
		return reply(external.Response{File: &external.FileChunk{Data: []byte(fakeContent[f.Offset:end]), EOF: end == len(fakeContent)}})
	}
	return fakeRun("run", req, out, reply)
}

// fakeCheckpoint is a program with native checkpoints whose artifacts
// are named "image-<checkpoint ID>"; "gone" is an artifact that is not
// there.
func fakeCheckpoint(mode string, req external.Request, good func() *external.Lease, reply func(external.Response) int) int {
	gone := req.Artifact != nil && req.Artifact.ID == "gone"
	switch req.Operation {
	case external.OpCapabilities:
		return reply(external.Response{Capabilities: &external.Capabilities{Checkpoint: true, Fork: true, Restore: true}})
	case external.OpCheckpointCreate:
		c := req.Checkpoint
		switch mode {
		case "checkpoint-wrong-id":
			return reply(external.Response{Artifact: &provider.CheckpointArtifact{ID: "image-wrong", CheckpointID: "ckp_ffffffffffff"}})
		case "checkpoint-no-artifact":
			return reply(external.Response{})
		}
		labels := map[string]string{provider.LabelCheckpoint: c.CheckpointID}
		maps.Copy(labels, c.Labels)
		return reply(external.Response{Artifact: &provider.CheckpointArtifact{ID: "image-" + c.CheckpointID, CheckpointID: c.CheckpointID, Labels: labels}})
	case external.OpCheckpointList:
		return reply(external.Response{Artifacts: []provider.CheckpointArtifact{{ID: "image-a", Labels: map[string]string{provider.LabelCheckpoint: "ckp_00000000000a"}}}})
	case external.OpCheckpointDelete, external.OpFork:
		if gone {
			return reply(external.Response{Error: "no image " + req.Artifact.ID, ErrorKind: "not-found"})
		}
		if req.Operation == external.OpFork {
			return reply(external.Response{Lease: good()})
		}
		return reply(external.Response{})
	case external.OpRestore:
		l := req.Lease
		return reply(external.Response{Lease: &external.Lease{LeaseID: l.LeaseID, Slug: l.Slug, SSH: &external.SSH{User: "crabbox", Host: "127.0.0.1", Port: 2222}}})
	}
	return reply(external.Response{Error: "unsupported operation " + req.Operation})
}

// block waits forever, in a system call so the runtime does not call it a
// deadlock.
func block() {
	r, w, err := os.Pipe()
	if err != nil {
		os.Exit(1)
	}
	defer w.Close()
	_, _ = r.Read(make([]byte, 1))
	os.Exit(1)
}
