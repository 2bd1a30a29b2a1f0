package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	procid "github.com/crabbox-dev/crabbox/internal/proc"
)

// procFile names the process behind a lease directory. Each process writes
// it itself, apart from the record: the one setting the lease up (no port
// yet), then the one serving its box, with the port. With it the box can
// be found, probed and stopped, and the leftovers of a process that died
// recognised, even when the record is unreadable.
const procFile = "proc.json"

// proc is the content of procFile.
type proc struct {
	// PID is the process setting the lease up or serving its box.
	PID int `json:"pid"`
	// Port is the loopback port the box serves SSH on; 0 until it serves.
	Port int `json:"port,omitempty"`
	// Agent is set when PID is an agent that serves only this box, so
	// that stopping the process stops only the box.
	Agent bool `json:"agent,omitempty"`
}

func readProc(dir string) (proc, error) {
	b, err := os.ReadFile(filepath.Join(dir, procFile))
	if err != nil {
		return proc{}, err
	}
	var p proc
	if err := json.Unmarshal(b, &p); err != nil {
		return proc{}, fmt.Errorf("parse %s: %w", filepath.Join(dir, procFile), err)
	}
	if p.PID <= 0 || p.Port < 0 {
		return proc{}, fmt.Errorf("%s names no process", filepath.Join(dir, procFile))
	}
	return p, nil
}

func writeProc(dir string, p proc) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, procFile), append(b, '\n'))
}

// boxRef is what can be learnt about the box of a lease directory: from
// its record, or, when that is unreadable, from procFile and the host key.
type boxRef struct {
	dir     string
	port    int    // 0: not serving yet, or unknown
	hostKey string // the box's public host key; empty when unknown
	// pid is the process setting up or serving the box, 0 when unknown.
	pid int
	// agent is set when pid serves only this box.
	agent bool
	// unknown says why nothing can be learnt about the box, when its
	// record exists but is unreadable and procFile does not help.
	unknown string
}

// locate learns what it can about the box of dir.
func locate(dir string) boxRef {
	rec, err := readRecord(dir)
	return locateWith(dir, rec, err)
}

// locateWith is locate with the record of dir already read: rec, or the
// error reading it.
func locateWith(dir string, rec record, recErr error) boxRef {
	ref := boxRef{dir: dir}
	p, procErr := readProc(dir)
	if recErr == nil {
		ref.port, ref.hostKey = rec.Port, rec.HostKey
		switch {
		case rec.PID != 0:
			ref.pid, ref.agent = rec.PID, true
		case procErr == nil && !p.Agent:
			ref.pid = p.PID // an in-process box's program
		}
		return ref
	}
	if procErr != nil {
		if !errors.Is(recErr, fs.ErrNotExist) {
			ref.unknown = fmt.Sprintf("its record is unreadable (%v) and so is %s (%v)", recErr, procFile, procErr)
		}
		return ref
	}
	ref.port, ref.pid, ref.agent = p.Port, p.PID, p.Agent
	if signer, err := loadHostKey(dir); err == nil {
		ref.hostKey = formatPublicKey(signer.PublicKey())
	}
	return ref
}

// boxStatus is whether a box serves.
type boxStatus int

const (
	boxStopped boxStatus = iota // not serving (perhaps not yet)
	boxServing
	boxUnknown // cannot tell
)

// status probes the box of ref. It is boxServing only when the box's port
// answers with its host key, and boxUnknown when that cannot be checked
// and something may still serve it.
func (r boxRef) status(ctx context.Context) (boxStatus, string) {
	if r.unknown != "" {
		return boxUnknown, r.unknown
	}
	if r.port <= 0 {
		return boxStopped, ""
	}
	if r.hostKey != "" {
		if probe(ctx, r.port, r.hostKey) {
			return boxServing, ""
		}
		return boxStopped, ""
	}
	// No host key to check the port with: a process that is gone, or a
	// port nobody listens on, serves nothing.
	if r.pid != 0 && !procid.Running(r.pid) {
		return boxStopped, ""
	}
	if !listening(ctx, r.port) {
		return boxStopped, ""
	}
	return boxUnknown, fmt.Sprintf("port %d answers, but without a readable host key it cannot be told to be this box's", r.port)
}

// listening reports whether a loopback port accepts connections.
func listening(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// processGone reports whether ref names a process and it is gone.
func (r boxRef) processGone() bool { return r.pid != 0 && !procid.Running(r.pid) }

// what names the process behind ref for messages.
func (r boxRef) what() string {
	if r.agent {
		return fmt.Sprintf("agent (pid %d)", r.pid)
	}
	return fmt.Sprintf("process (pid %d)", r.pid)
}
