package local

import (
	"bufio"
	"context"
	"errors"
	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// killedOneShot runs a one-shot run in a child process that serves its box
// in-process under root, and kills it (SIGKILL) once its box is ready and
// holds a synced file. It returns the lease ID.
func killedOneShot(t *testing.T, root string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentPath(t))
	cmd.Env = append(os.Environ(), testOneShotEnv+"="+root)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	_ = cmd.Process.Kill() // as kill -9 would, whatever the line says
	_, _ = io.Copy(io.Discard, stdout)
	_ = cmd.Wait()
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		t.Fatalf("one-shot run said %q, want \"ready <lease>\"; stderr:\n%s", line, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(root, id, workDir, "synced.txt")); err != nil {
		t.Fatalf("the killed run left no synced copy: %v", err)
	}
	return id
}

// TestKilledOneShotLeftovers: a one-shot run serves its box in-process;
// killed with SIGKILL it cannot remove its lease directory (the synced copy
// included). Nothing treats that lease as live, and the next cleanup
// removes it at once, before its expiry: with the caller's claim, and also
// without one, since the process that served the box is provably gone.
func TestKilledOneShotLeftovers(t *testing.T) {
	for _, claimed := range []bool{true, false} {
		root := t.TempDir()
		id := killedOneShot(t, root)
		b := newBackend(t, Config{Root: root}, nil)
		if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: id}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Resolve of the killed run's lease: err = %v, want one matching ErrNotFound", err)
		}
		if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: "one-shot"}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Resolve of the killed run's slug: err = %v, want one matching ErrNotFound", err)
		}
		if all, err := b.List(t.Context(), provider.ListRequest{}); err != nil || len(all) != 0 {
			t.Errorf("List = %v, %v; want no leases", all, err)
		}
		_, err := b.Touch(t.Context(), provider.TouchRequest{Lease: provider.LeaseTarget{LeaseID: id}, Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		if !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Touch of the killed run's lease: err = %v, want one matching ErrNotFound", err)
		}
		got, err := b.Cleanup(t.Context(), provider.CleanupRequest{Now: time.Now(), Claimed: func(string) bool { return claimed }})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].LeaseID != id || !got[0].Delete || !got[0].Deleted || got[0].Err != nil ||
			!strings.Contains(got[0].Reason, "is gone: removing leftovers") {
			t.Errorf("Cleanup (claimed=%v) = %+v, want lease %s deleted as the leftovers of a dead process", claimed, got, id)
		}
		checkEmpty(t, root)
	}
}

// corruptions are ways a box-side record can go bad under a serving box.
var corruptions = []struct {
	name    string
	corrupt func(t *testing.T, dir string)
}{
	{"garbage", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, recordFile), "{not json") }},
	{"empty", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, recordFile), "") }},
	{"another lease's", func(t *testing.T, dir string) {
		writeFile(t, filepath.Join(dir, recordFile), `{"id":"cbx_000000000000","port":1,"pid":1}`)
	}},
	{"removed", func(t *testing.T, dir string) {
		if err := os.Remove(filepath.Join(dir, recordFile)); err != nil {
			t.Fatal(err)
		}
	}},
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseStopsAgentWithCorruptRecord: release stops an agent-served
// box even when its record is unreadable: ReleaseLease returns only once
// the box no longer answers and its agent is gone.
func TestReleaseStopsAgentWithCorruptRecord(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			b := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
			req, _ := newRequest(t, time.Now(), time.Hour)
			if _, err := b.Acquire(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			dir := b.leaseDir(req.LeaseID)
			rec, err := readRecord(dir)
			if err != nil {
				t.Fatal(err)
			}
			pid := agentPID(t, b, req.LeaseID)
			t.Cleanup(func() { // should the test fail, end the agent all the same
				if p, err := os.FindProcess(pid); err == nil && procid.Running(pid) {
					_ = p.Kill()
				}
			})
			c.corrupt(t, dir)

			if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: req.LeaseID}}); err != nil {
				t.Fatalf("ReleaseLease: %v", err)
			}
			if live(t.Context(), rec) {
				t.Error("the box still answers after ReleaseLease returned")
			}
			if procid.Running(pid) {
				t.Errorf("agent (pid %d) still runs after ReleaseLease returned", pid)
			}
			checkEmpty(t, root)
		})
	}
}

// TestReleaseOfOthersInProcessBoxWithCorruptRecord: a box another program
// serves in-process cannot be stopped from here, record or no record:
// release says so and changes nothing.
func TestReleaseOfOthersInProcessBoxWithCorruptRecord(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			owner := newBackend(t, Config{Root: root}, nil)
			req, _ := newRequest(t, time.Now(), time.Hour)
			target, err := owner.Acquire(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := readRecord(owner.leaseDir(req.LeaseID))
			if err != nil {
				t.Fatal(err)
			}
			c.corrupt(t, owner.leaseDir(req.LeaseID))

			other := newBackend(t, Config{Root: root}, nil)
			err = other.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target})
			if !errors.Is(err, provider.ErrPrecondition) {
				t.Errorf("ReleaseLease of another program's box: err = %v, want one matching ErrPrecondition", err)
			}
			if !live(t.Context(), rec) {
				t.Error("the box stopped answering")
			}
			if _, err := os.Stat(filepath.Join(owner.leaseDir(req.LeaseID), workDir)); err != nil {
				t.Errorf("work root of the box: %v, want it kept", err)
			}
			// Cleanup, even with a claim, leaves a serving box alone.
			ds, err := other.Cleanup(t.Context(), provider.CleanupRequest{Now: time.Now().Add(2 * time.Hour), Claimed: func(string) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != 1 || ds[0].Delete || ds[0].Deleted {
				t.Errorf("Cleanup of a serving box with a bad record = %+v, want it left alone", ds)
			}
			if !live(t.Context(), rec) {
				t.Error("the box stopped answering after cleanup")
			}
			if err := owner.Close(); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, root)
		})
	}
}

// TestReleaseThatCannotFindTheBoxFails: with the record unreadable and
// nothing else to find the serving agent by, release fails and leaves the
// box alone rather than removing its directory from under it.
func TestReleaseThatCannotFindTheBoxFails(t *testing.T) {
	for _, tt := range []struct {
		name    string
		corrupt func(t *testing.T, dir string)
		want    string
	}{
		{"no proc.json", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, procFile)); err != nil {
				t.Fatal(err)
			}
		}, "its record is unreadable"},
		{"no host key", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, hostKeyFile)); err != nil {
				t.Fatal(err)
			}
		}, "cannot be told to be this box's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			b := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
			req, _ := newRequest(t, time.Now(), time.Hour)
			target, err := b.Acquire(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			dir := b.leaseDir(req.LeaseID)
			rec, err := readRecord(dir)
			if err != nil {
				t.Fatal(err)
			}
			pid := agentPID(t, b, req.LeaseID)
			defer func() {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
					waitExit(context.Background(), pid, 30*time.Second)
				}
			}()
			writeFile(t, filepath.Join(dir, recordFile), "{not json")
			tt.corrupt(t, dir)

			err = b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReleaseLease = %v, want an error saying %q", err, tt.want)
			}
			if !live(t.Context(), rec) {
				t.Error("the box stopped answering")
			}
			if _, err := os.Stat(filepath.Join(dir, workDir)); err != nil {
				t.Errorf("work root: %v, want it kept", err)
			}
		})
	}
}
