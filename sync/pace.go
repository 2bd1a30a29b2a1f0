package sync

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	gosync "sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// A push paces its archive to the box's tar. sshd takes all the data its
// channel window allows (2 MiB for OpenSSH) whether or not the process
// behind it keeps up, and holds what the process has not read in one
// buffer that it grows 32 KiB at a time, copying the whole buffer into
// fresh pages at each step, before it writes to the process again. A
// client faster than tar, as a push reading files from the page cache is,
// so has sshd grow that buffer to 4 MiB while tar waits: on a 20,000-file
// first sync over loopback, sshd then ran alone for about 130 ms. Kept
// within paceWindow of what tar has read, the buffer stays small: sshd's
// CPU time fell from about 600 to 370-410 ms a sync.
//
// GNU tar says what it has read: with --checkpoint=N
// --checkpoint-action=dot it prints a dot on its standard output before it
// reads each Nth record. The transfer step asks for that when the box's tar
// is GNU tar and says whether it did on the line "crabbox-sync pace dots"
// (or "none"), before tar starts; other tars are not paced.

const (
	// paceRecord is the record size of a paced tar (--blocking-factor=128).
	paceRecord = 128 * 512
	// paceRecords is the records between dots (--checkpoint).
	paceRecords = 4
	// paceWindow bounds the archive bytes sent ahead of what the box's tar
	// has read. Measured on 2 cores over loopback (medians of 10), 768 KiB
	// and 1 MiB ran a 20,000-file first sync 7-15% faster than no pacing;
	// 256 and 512 KiB, 0-5%.
	paceWindow = 1 << 20
	// paceMaxRTT is the longest round trip to the box at which a push
	// paces: paceWindow a round trip is 512 MiB/s there, more than the
	// links of such round trips carry. Over a longer link, pacing could
	// cap the transfer below what the link carries, and the link, not the
	// push, is then what outruns tar, if anything. (Loopback measures
	// 0.2-0.8 ms here, with sshd and Go's scheduling in it.)
	paceMaxRTT = 2 * time.Millisecond
)

// nearBox reports whether the box is within maxRTT: whether it answers a
// keepalive request, which sshd, and a shared connection's local hop
// passing it on, answer (with failure) at once, that soon. A box that does
// not answer by then is far, or busy, or gone, which the transfer will
// tell.
func nearBox(ctx context.Context, client *ssh.Client, maxRTT time.Duration) bool {
	answered := remote.Keepalive(client)
	t := time.NewTimer(maxRTT)
	defer t.Stop()
	select {
	case err := <-answered:
		return err == nil
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// paceMarker starts the transfer step's line saying whether it paces.
const paceMarker = "crabbox-sync pace "

// pacer writes the archive to w no further than paceWindow ahead of what
// the box's tar reports having read on out, the session's standard output.
type pacer struct {
	w    io.Writer
	mu   gosync.Mutex
	cond *gosync.Cond
	sent int64 // bytes written to w
	read int64 // bytes tar has read at least
	free bool  // the box does not pace (or the session ended): write at will
	// done is closed once out has ended.
	done chan struct{}
	// learnt, if set, learns the pace line's word ("dots", "none"), or ""
	// for a box that printed none (tests).
	learnt func(string)
	// waiting, if set, is called each time Write waits (tests).
	waiting func()
}

// newPacer starts reading out, which it drains until it ends. Once ctx
// ends, the writer no longer waits.
func newPacer(ctx context.Context, w io.Writer, out *bufio.Reader, learnt func(string)) *pacer {
	p := &pacer{w: w, done: make(chan struct{}), learnt: learnt}
	p.cond = gosync.NewCond(&p.mu)
	stop := context.AfterFunc(ctx, p.release)
	go func() {
		defer stop()
		p.follow(out)
	}()
	return p
}

// follow reads the transfer step's pace line, then counts tar's dots until
// out ends. Anything but "dots" frees the writer, as does the end of out:
// a box that says nothing is never waited for. tar's dot before reading
// record k·paceRecords means it has read the k·paceRecords-1 records before
// it; a dot more in out (a box whose TAR_OPTIONS has tar list file names
// there too) only lets the writer run further ahead.
func (p *pacer) follow(out *bufio.Reader) {
	defer close(p.done)
	defer p.release()
	line, err := out.ReadString('\n')
	word, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), paceMarker)
	if err != nil || !ok {
		word = ""
	}
	paced := word == "dots"
	if !paced {
		p.release() // before learnt: a test writes once it learns
	}
	if p.learnt != nil {
		p.learnt(word)
	}
	if !paced {
		_, _ = io.Copy(io.Discard, out)
		return
	}
	buf := make([]byte, 4096)
	var dots int64
	for {
		n, err := out.Read(buf)
		if k := int64(bytes.Count(buf[:n], []byte{'.'})); k > 0 {
			dots += k
			p.mu.Lock()
			p.read = dots*paceRecords*paceRecord - paceRecord
			p.mu.Unlock()
			p.cond.Broadcast()
		}
		if err != nil {
			return
		}
	}
}

// release lets the writer write at will from now on.
func (p *pacer) release() {
	p.mu.Lock()
	p.free = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Write waits until the box's tar is within paceWindow of what was sent,
// then writes b.
func (p *pacer) Write(b []byte) (int, error) {
	p.mu.Lock()
	for !p.free && p.sent-p.read > paceWindow {
		if p.waiting != nil {
			p.waiting()
		}
		p.cond.Wait()
	}
	p.sent += int64(len(b))
	p.mu.Unlock()
	return p.w.Write(b)
}
