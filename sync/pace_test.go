package sync

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
)

// countWriter counts what the pacer lets through.
type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) {
	c.n += int64(len(b))
	return len(b), nil
}

// testPacer is a pacer over a pipe standing for the box's output; out is
// closed, and the pacer's reader awaited, when the test ends.
func testPacer(t *testing.T, ctx context.Context, learnt func(string)) (*pacer, *countWriter, *io.PipeWriter, chan struct{}) {
	t.Helper()
	r, out := io.Pipe()
	w := &countWriter{}
	p := newPacer(ctx, w, bufio.NewReader(r), learnt)
	waited := make(chan struct{}, 1)
	p.waiting = func() {
		select {
		case waited <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() {
		out.Close()
		<-p.done
	})
	return p, w, out, waited
}

// writeAsync writes n bytes through p in the background.
func writeAsync(p *pacer, n int) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := p.Write(make([]byte, n))
		done <- err
	}()
	return done
}

func say(t *testing.T, out io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(out, s); err != nil {
		t.Fatal(err)
	}
}

// The writer runs up to paceWindow ahead of what the box's tar has read,
// before the pace line too, and goes on as tar's dots come: a dot before
// record 4k says tar has read 4k-1 records.
func TestPacerWaitsForTar(t *testing.T) {
	p, w, out, waited := testPacer(t, t.Context(), nil)
	if _, err := p.Write(make([]byte, paceWindow)); err != nil {
		t.Fatal(err)
	}
	done := writeAsync(p, paceRecord)
	// Nothing read yet, but nothing sent past the window: no wait.
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done = writeAsync(p, 1)
	<-waited // paceWindow+paceRecord sent, none read
	say(t, out, paceMarker+"dots\n")
	say(t, out, ".") // 3 records read: the writer may go on
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := int64(paceWindow + paceRecord + 1); w.n != want {
		t.Errorf("wrote %d bytes, want %d", w.n, want)
	}
	p.mu.Lock()
	read := p.read
	p.mu.Unlock()
	if want := int64(3 * paceRecord); read != want {
		t.Errorf("after one dot, tar has read %d bytes, want %d", read, want)
	}

	// The next dots let the writer send a window past them.
	done = writeAsync(p, 4*paceRecord)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done = writeAsync(p, 1)
	<-waited
	say(t, out, "..")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A box that does not pace, or says nothing, is never waited for.
func TestPacerUnpaced(t *testing.T) {
	for _, tc := range []struct{ out, word string }{
		{paceMarker + "none\n", "none"},
		{"", ""},
		{"something else\n", ""},
		{paceMarker + "dots", ""}, // cut short
	} {
		t.Run(fmt.Sprintf("%q", tc.out), func(t *testing.T) {
			learnt := make(chan string, 1)
			p, w, out, _ := testPacer(t, t.Context(), func(w string) { learnt <- w })
			p.waiting = func() { t.Error("the writer waited") }
			say(t, out, tc.out)
			if !strings.HasSuffix(tc.out, "\n") {
				out.Close()
			}
			if got := <-learnt; got != tc.word {
				t.Errorf("learnt %q, want %q", got, tc.word)
			}
			for range 3 {
				if _, err := p.Write(make([]byte, paceWindow+1)); err != nil {
					t.Fatal(err)
				}
			}
			if want := int64(3 * (paceWindow + 1)); w.n != want {
				t.Errorf("wrote %d bytes, want %d", w.n, want)
			}
		})
	}
}

// A writer waiting for the box goes on once the push is canceled (and
// fails on the closed session).
func TestPacerCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p, _, out, waited := testPacer(t, ctx, nil)
	say(t, out, paceMarker+"dots\n")
	if _, err := p.Write(make([]byte, paceWindow+1)); err != nil {
		t.Fatal(err)
	}
	done := writeAsync(p, 1)
	<-waited
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// gnuTar reports whether this machine's tar is GNU tar.
func gnuTar(t *testing.T) bool {
	out, err := exec.Command("tar", "--version").Output()
	return err == nil && strings.HasPrefix(string(out), "tar (GNU tar) ")
}

// bigTree is plainTree with files that make the archive several pace
// windows long.
func bigTree(t *testing.T) string {
	t.Helper()
	root := plainTree(t, 20, "v1")
	for i := range 3 {
		data := make([]byte, 3*paceWindow/2+i)
		rand.Read(data)
		write(t, root, fmt.Sprintf("big%d.bin", i), string(data), 0o644)
	}
	backdate(t, root)
	return root
}

// A push of more than a pace window asks which tar the box has; GNU tar
// paces it with dots, and the tree arrives whole either way.
func TestPushPaced(t *testing.T) {
	client := dial(t)
	root := bigTree(t)
	var words []string
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir, paced: func(w string) { words = append(words, w) }, paceMaxRTT: time.Hour}
	push(t, client, opts)
	want := []string{"none"}
	if gnuTar(t) {
		want = []string{"dots"}
	}
	if diff := cmp.Diff(want, words); diff != "" {
		t.Errorf("pace lines (-want +got):\n%s", diff)
	}
	sameTree(t, root, remoteDir)

	// A small change fits in the window: no question asked.
	write(t, root, "d0/f000.txt", "changed\n", 0o644)
	words = nil
	push(t, client, opts)
	if words != nil {
		t.Errorf("a small push paced: %q", words)
	}
	sameTree(t, root, remoteDir)
}

// A box further than paceMaxRTT is not paced: the window would cap the
// transfer at paceWindow a round trip.
func TestPushFarBoxUnpaced(t *testing.T) {
	client := dial(t)
	root := bigTree(t)
	var words []string
	remoteDir := t.TempDir()
	push(t, client, Options{Root: root, RemoteDir: remoteDir, paced: func(w string) { words = append(words, w) }, paceMaxRTT: time.Nanosecond})
	if words != nil {
		t.Errorf("a far box paced: %q", words)
	}
	sameTree(t, root, remoteDir)
}

// A tar that is not GNU tar gets no checkpoint options and is not paced.
func TestPushPacedOtherTar(t *testing.T) {
	if !gnuTar(t) {
		t.Skip("the stand-in passes its arguments on to this machine's tar, which must be GNU tar")
	}
	client := dial(t)
	root := bigTree(t)
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	tar := filepath.Join(dir, "tar")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = --version ]; then echo 'bsdtar 3.7.2 - libarchive 3.7.2'; exit 0; fi\n" +
		"echo \"$*\" >>" + remote.Quote(args) + "\nexec tar \"$@\"\n"
	if err := os.WriteFile(tar, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var words []string
	remoteDir := t.TempDir()
	push(t, client, Options{Root: root, RemoteDir: remoteDir, tar: tar, paced: func(w string) { words = append(words, w) }, paceMaxRTT: time.Hour})
	if diff := cmp.Diff([]string{"none"}, words); diff != "" {
		t.Errorf("pace lines (-want +got):\n%s", diff)
	}
	got, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("-xf -\n", string(got)); diff != "" {
		t.Errorf("tar's arguments (-want +got):\n%s", diff)
	}
	sameTree(t, root, remoteDir)
}

// A box that does not answer the keepalive within paceMaxRTT (here
// crabbox's own SSH server, whose handler for it hangs) is not paced, and
// the push neither waits for the answer nor fails.
func TestPushKeepaliveUnanswered(t *testing.T) {
	hang := make(chan struct{})
	client := sshservertest.Dial(t, map[string]func([]byte) (bool, []byte){
		remote.KeepaliveRequest: func([]byte) (bool, []byte) { <-hang; return false, nil },
	})
	t.Cleanup(func() { close(hang) }) // first: the handler returns, then the server closes

	root := bigTree(t)
	var words []string
	remoteDir := t.TempDir()
	push(t, client, Options{Root: root, RemoteDir: remoteDir, paced: func(w string) { words = append(words, w) }, paceMaxRTT: 50 * time.Millisecond})
	if words != nil {
		t.Errorf("a box that did not answer paced: %q", words)
	}
	sameTree(t, root, remoteDir)
}

// What the box's tar prints on its standard output (a TAR_OPTIONS with -v
// lists every file there) is read and dropped, paced or not: more than the
// session's window of it must not stall the push.
func TestPushTarOutputDrained(t *testing.T) {
	client := dial(t)
	for _, big := range []bool{false, true} {
		t.Run(fmt.Sprintf("past the pace window=%v", big), func(t *testing.T) {
			root := plainTree(t, 5, "v1")
			if big {
				root = bigTree(t)
			}
			tar := filepath.Join(t.TempDir(), "tar")
			script := "#!/bin/sh\n[ \"$1\" = --version ] || head -c 3000000 /dev/zero | tr '\\000' x\nexec tar \"$@\"\n"
			if err := os.WriteFile(tar, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			remoteDir := t.TempDir()
			if _, err := pushWithin(t, client, Options{Root: root, RemoteDir: remoteDir, tar: tar, paceMaxRTT: time.Hour}); err != nil {
				t.Fatalf("Push: %v", err)
			}
			sameTree(t, root, remoteDir)
		})
	}
}

// A paced push whose box's tar fails part way (a full disk) reports it as
// it does unpaced, instead of waiting for dots that never come.
func TestPushPacedTarFails(t *testing.T) {
	if !gnuTar(t) {
		t.Skip("the stand-in answers --version with this machine's tar, which must be GNU tar to be paced")
	}
	client := dial(t)
	root := bigTree(t)
	tar := filepath.Join(t.TempDir(), "tar")
	script := "#!/bin/sh\n[ \"$1\" = --version ] && exec tar --version\n" +
		"head -c 300000 >/dev/null\n" +
		"echo 'tar: big0.bin: Cannot write: No space left on device' >&2\nexit 2\n"
	if err := os.WriteFile(tar, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var words []string
	remoteDir := t.TempDir()
	_, err := pushWithin(t, client, Options{Root: root, RemoteDir: remoteDir, tar: tar, paced: func(w string) { words = append(words, w) }, paceMaxRTT: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "the box's disk is full (") || !strings.Contains(err.Error(), " free in "+remoteDir+")") {
		t.Fatalf("push into a full disk: %v, want the box's disk is full (... free in %s)", err, remoteDir)
	}
	if diff := cmp.Diff([]string{"dots"}, words); diff != "" {
		t.Errorf("pace lines (-want +got):\n%s", diff)
	}
}

// pushWithin pushes, failing the test as a stall, not a hang, when the push
// has not ended within a minute (these pushes take well under a second).
func pushWithin(t *testing.T, client *ssh.Client, opts Options) (Stats, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stats, err := Push(ctx, client, opts)
	if ctx.Err() != nil {
		t.Fatalf("the push stalled: %v", err)
	}
	return stats, err
}
