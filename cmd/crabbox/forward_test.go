package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePortSpec(t *testing.T) {
	for _, tc := range []struct {
		spec          string
		local, remote int
		err           string
	}{
		{"8080", 8080, 8080, ""},
		{"8080:3000", 8080, 3000, ""},
		{"0:3000", 0, 3000, ""},
		{"0", 0, 0, "box port 0"},
		{"8080:0", 0, 0, "box port 0"},
		{"70000", 0, 0, "local port 70000"},
		{"80:70000", 0, 0, "box port 70000"},
		{"http", 0, 0, `local port "http" is not a number`},
		{"80:", 0, 0, `box port "" is not a number`},
		{"80:90:100", 0, 0, `box port "90:100" is not a number`},
	} {
		local, remote, err := parsePortSpec(tc.spec)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parsePortSpec(%q) error = %v, want one saying %q", tc.spec, err, tc.err)
		case tc.err == "" && (err != nil || local != tc.local || remote != tc.remote):
			t.Errorf("parsePortSpec(%q) = %d, %d, %v; want %d, %d", tc.spec, local, remote, err, tc.local, tc.remote)
		}
	}
}

// Bad specs are usage errors naming the spec, before any lease is looked
// up.
func TestForwardBadSpec(t *testing.T) {
	env := stateEnv(t)
	for _, args := range [][]string{{"forward", "no-such-box", "8080:x"}, {"forward", "no-such-box", "0"}, {"forward", "no-such-box"}} {
		r := crabboxCmd(t, env, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "forward:") {
			t.Errorf("crabbox %v: exit %d, stderr %q; want %d and a usage error", args, r.code, r.stderr, exitUsage)
		}
	}
	if r := crabboxCmd(t, env, "", "forward", "no-such-box", "8080:x"); !strings.Contains(r.stderr, `"8080:x"`) {
		t.Errorf("the usage error does not name the spec: %q", r.stderr)
	}
}

// crabbox forward serves until interrupted: a web server on the box (the
// local provider's box is this machine) answers through the port it
// printed, several specs at once, with --json.
func TestForwardCommand(t *testing.T) {
	env := stateEnv(t)
	dir := gitRepo(t)
	warm := warmLease(t, env, dir)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the box\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	for _, asJSON := range []bool{false, true} {
		args := []string{"forward", warm.Slug, "0:" + strconv.Itoa(port), "0:" + strconv.Itoa(port)}
		if asJSON {
			args = append(args, "--json")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		var addrs []string
		for range 2 {
			if !lines.Scan() {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("crabbox %v printed no forward; stderr %q", args, stderr.String())
			}
			line := lines.Text()
			if asJSON {
				var got forwardJSON
				if err := json.Unmarshal([]byte(line), &got); err != nil {
					t.Fatalf("--json line %q: %v", line, err)
				}
				addrs = append(addrs, got.Local)
				got.Local = ""
				want := forwardJSON{LeaseID: warm.ID, Slug: warm.Slug, RemoteHost: "127.0.0.1", RemotePort: port}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("--json (-want +got):\n%s", diff)
				}
				continue
			}
			local, ok := strings.CutPrefix(line, "forwarding ")
			local, rest, _ := strings.Cut(local, " ")
			if !ok || rest != "-> box "+strconv.Itoa(port) {
				t.Errorf("line %q, want forwarding ADDR -> box %d", line, port)
			}
			addrs = append(addrs, local)
		}
		for _, addr := range addrs {
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				t.Errorf("GET through %s: %v", addr, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello from the box\n" {
				t.Errorf("GET through %s = %q", addr, body)
			}
		}
		cmd.Process.Signal(os.Interrupt)
		go io.Copy(io.Discard, out)
		err = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
			t.Errorf("after Ctrl-C: exit %d (%v), want %d; stderr %q", code, err, exitInterrupted, stderr.String())
		}
		for _, addr := range addrs {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				t.Errorf("%s still listens after the command ended", addr)
			}
		}
	}
}

// A connection to a port nothing listens on, on the box, is closed and
// warned about on stderr; the forward goes on.
func TestForwardWarnsOfRefusedConnections(t *testing.T) {
	env := stateEnv(t)
	dir := gitRepo(t)
	warm := warmLease(t, env, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := exec.Command(os.Args[0], "forward", warm.ID, "0:"+strconv.Itoa(port))
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(os.Interrupt)
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("no forward printed; stderr %q", stderr.String())
	}
	local, _, _ := strings.Cut(strings.TrimPrefix(lines.Text(), "forwarding "), " ")
	for range 2 {
		c, err := net.Dial("tcp", local)
		if err != nil {
			t.Fatalf("the forward stopped listening: %v", err)
		}
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("read %d bytes from a port nothing listens on", n)
		}
		c.Close()
	}
	cmd.Process.Signal(os.Interrupt)
	go io.Copy(io.Discard, out)
	cmd.Wait()
	if want := "connect to 127.0.0.1:" + strconv.Itoa(port) + " on the box"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not say %q", stderr.String(), want)
	}
}
