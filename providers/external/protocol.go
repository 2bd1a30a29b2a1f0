package external

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// ProtocolVersion is the version of the protocol crabbox speaks; every
// request carries it and every response must echo it.
const ProtocolVersion = 1

// MaxResponseBytes bounds one response (and one line of a run stream).
const MaxResponseBytes = 1 << 20

// Operations of the protocol.
const (
	OpCapabilities = "capabilities"
	OpDoctor       = "doctor"
	OpAcquire      = "acquire"
	OpResolve      = "resolve"
	OpList         = "list"
	OpTouch        = "touch"
	OpRelease      = "release"
	OpCleanup      = "cleanup"
	OpRun          = "run"
	// OpWriteFile and OpReadFile are crabbox's additions for programs that
	// declare capabilities.files (with capabilities.run): crabbox syncs the
	// checkout into the sandbox through them.
	OpWriteFile = "write-file"
	OpReadFile  = "read-file"
	// The native checkpoint operations are crabbox's additions for
	// programs that declare capabilities.checkpoint (and .fork, .restore):
	// a checkpoint saves a lease's box as a provider artifact (an image, a
	// snapshot), fork starts a new box from one, restore puts a lease's
	// box back to one. See provider.NativeCheckpointBackend.
	OpCheckpointCreate = "checkpoint-create"
	OpCheckpointList   = "checkpoint-list"
	OpCheckpointDelete = "checkpoint-delete"
	OpFork             = "fork"
	OpRestore          = "restore"
)

// MaxFileChunk bounds the file content one write-file request carries and
// one read-file response returns (before base64), so that both stay well
// under 1 MiB; larger files take several calls at increasing offsets.
const MaxFileChunk = 512 << 10

// Reserved labels: crabbox sets them on every lease and a program may only
// echo them.
const (
	LabelLease = "lease"
	LabelSlug  = "slug"
	LabelName  = "name"
)

// Request is the one JSON object crabbox writes to the program's stdin.
// Field names follow docs/external-provider.md exactly.
type Request struct {
	ProtocolVersion int             `json:"protocolVersion"`
	Operation       string          `json:"operation"`
	Config          json.RawMessage `json:"config,omitempty"`
	Desired         *Desired        `json:"desired,omitempty"`
	Lease           *Lease          `json:"lease,omitempty"`
	Leases          []Lease         `json:"leases,omitempty"` // cleanup
	ID              string          `json:"id,omitempty"`
	State           string          `json:"state,omitempty"`
	Keep            bool            `json:"keep,omitempty"`
	Force           bool            `json:"force,omitempty"`
	All             bool            `json:"all,omitempty"`
	DryRun          bool            `json:"dryRun,omitempty"`
	Repo            *Repo           `json:"repo,omitempty"`
	// Command, Env and Workdir are set for run.
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	// Dir is crabbox's addition to run: the absolute directory in the
	// sandbox to run in, set instead of repo and workdir when crabbox
	// synced the checkout itself through write-file (capabilities.files).
	Dir string `json:"dir,omitempty"`
	// File is crabbox's addition for write-file and read-file.
	File *FileRequest `json:"file,omitempty"`
	// StateDir is crabbox's addition for its own provider programs
	// (Plugin): the directory the provider may keep its state in, as
	// provider.Runtime.StateDir in-process.
	StateDir string `json:"stateDir,omitempty"`
	// Now is crabbox's addition to cleanup and touch: the time crabbox
	// decides expiry by, so that the program decides by the same clock.
	Now time.Time `json:"now,omitzero"`
	// Checkpoint is crabbox's addition to checkpoint-create: the
	// checkpoint to make of the box of Lease.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Artifact is crabbox's addition to checkpoint-delete, fork and
	// restore: an artifact as checkpoint-create or checkpoint-list
	// returned it, handed back whole.
	Artifact *provider.CheckpointArtifact `json:"artifact,omitempty"`
	// PublicKey is crabbox's addition to restore: the lease key
	// (authorized_keys line) the restored box must accept.
	PublicKey string `json:"publicKey,omitempty"`
}

// Checkpoint is the checkpoint part of a checkpoint-create request.
type Checkpoint struct {
	// CheckpointID is crabbox's ID of the checkpoint ("ckp_" and 12 hex
	// digits); the artifact carries it as its checkpointId and its
	// "checkpoint" label.
	CheckpointID string `json:"checkpointId"`
	// Labels are extra labels from the caller for the artifact.
	Labels map[string]string `json:"labels,omitempty"`
}

// FileRequest is the file part of a write-file or read-file request.
type FileRequest struct {
	// Path is absolute and slash-separated, in the lease's sandbox.
	Path string `json:"path"`
	// Offset is where Data goes (write-file) or where reading starts
	// (read-file). A write at offset 0 creates or truncates the file
	// (creating its parent directories) and sets Mode; a write at a larger
	// offset appends to a file that has exactly Offset bytes.
	Offset int64 `json:"offset"`
	// Mode is the file's permission bits (write-file), e.g. 420 for 0644.
	Mode uint32 `json:"mode,omitempty"`
	// Data is the content to write, base64 in JSON; at most MaxFileChunk
	// bytes. Absent means empty.
	Data []byte `json:"data,omitempty"`
	// Length is the most bytes a read-file response may return.
	Length int `json:"length,omitempty"`
	// Last marks a write-file chunk that ends the file, so that a program
	// whose service writes only whole files can stage the chunks and write
	// the file when this one arrives.
	Last bool `json:"last,omitempty"`
}

// FileChunk is the file part of a read-file response.
type FileChunk struct {
	// Data is the content from the request's offset, base64 in JSON; at
	// most the request's length bytes.
	Data []byte `json:"data,omitempty"`
	// EOF says Data reaches the end of the file.
	EOF bool `json:"eof,omitempty"`
}

// Desired is the lease crabbox asks an acquire to create.
type Desired struct {
	LeaseID string `json:"leaseId"`
	Slug    string `json:"slug"`
	Name    string `json:"name"`
	// The fields below are crabbox's additions to the original shape.
	// PublicKey is the lease key (authorized_keys line) the box should
	// accept; empty for delegated-run leases, which crabbox never reaches
	// over SSH.
	PublicKey          string            `json:"publicKey,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	TTLSeconds         int64             `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds int64             `json:"idleTimeoutSeconds,omitempty"`
	CreatedAt          time.Time         `json:"createdAt,omitzero"`
	ExpiresAt          time.Time         `json:"expiresAt,omitzero"`
}

// Repo describes the local checkout of a run.
type Repo struct {
	Root      string `json:"root"`
	Name      string `json:"name"`
	RemoteURL string `json:"remoteUrl,omitempty"`
	Head      string `json:"head,omitempty"`
}

// Lease is a lease object as programs return it.
type Lease struct {
	LeaseID    string            `json:"leaseId"`
	Slug       string            `json:"slug,omitempty"`
	Name       string            `json:"name,omitempty"`
	CloudID    string            `json:"cloudId,omitempty"`
	Status     string            `json:"status,omitempty"`
	ServerType string            `json:"serverType,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	SSH        *SSH              `json:"ssh,omitempty"`
	// crabbox's additions: the directory on the box under which lease
	// workdirs are made, and the lease's times (RFC 3339).
	WorkRoot  string    `json:"workRoot,omitempty"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// SSH is how a box is reached.
type SSH struct {
	User          string `json:"user,omitempty"`
	Host          string `json:"host,omitempty"`
	Port          int    `json:"port,omitempty"`
	FallbackPorts []int  `json:"fallbackPorts,omitempty"`
	// Key is a private key file on this machine that the box accepts;
	// empty means the lease key crabbox sent in desired.publicKey.
	Key        string `json:"key,omitempty"`
	HostKey    string `json:"hostKey,omitempty"`
	ReadyCheck string `json:"readyCheck,omitempty"`
}

// Capabilities is what a program can do.
type Capabilities struct {
	IdempotentLeaseID bool `json:"idempotentLeaseId"`
	Run               bool `json:"run"`
	Cleanup           bool `json:"cleanup"`
	// Files is crabbox's addition: the program implements write-file and
	// read-file (it must also implement run).
	Files bool `json:"files,omitempty"`
	// Touch is crabbox's addition for delegated-run programs: touch moves
	// a sandbox's expiry at the provider.
	Touch bool `json:"touch,omitempty"`
	// Checkpoint, Fork and Restore are crabbox's additions: the program
	// implements checkpoint-create, checkpoint-list and checkpoint-delete;
	// fork; restore. Fork and Restore need Checkpoint.
	Checkpoint bool `json:"checkpoint,omitempty"`
	Fork       bool `json:"fork,omitempty"`
	Restore    bool `json:"restore,omitempty"`
}

// Response is the one JSON object a program writes to stdout.
type Response struct {
	ProtocolVersion int           `json:"protocolVersion"`
	Lease           *Lease        `json:"lease,omitempty"`
	Leases          []Lease       `json:"leases,omitempty"`
	Capabilities    *Capabilities `json:"capabilities,omitempty"`
	// File is crabbox's addition: the answer to read-file.
	File *FileChunk `json:"file,omitempty"`
	// Artifact is crabbox's addition: the answer to checkpoint-create.
	Artifact *provider.CheckpointArtifact `json:"artifact,omitempty"`
	// Artifacts is crabbox's addition: the answer to checkpoint-list.
	Artifacts []provider.CheckpointArtifact `json:"artifacts,omitempty"`
	// Checks is crabbox's addition to doctor: the program's own checks,
	// each reported as a line of crabbox doctor. Without it the message
	// is one passing check.
	Checks  []provider.Check `json:"checks,omitempty"`
	Message string           `json:"message,omitempty"`
	Error   string           `json:"error,omitempty"`
	// ErrorKind is crabbox's addition: one of "not-found", "conflict",
	// "capacity", "unauthenticated", "precondition", "transient", so that
	// callers can tell failures apart (errors.Is with provider.Err...).
	ErrorKind string `json:"errorKind,omitempty"`
}

// RunEvent is one line of a run operation's output stream.
type RunEvent struct {
	Stream   string `json:"stream,omitempty"`
	Data     string `json:"data,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
}

var errorKinds = map[string]error{
	"not-found":       provider.ErrNotFound,
	"conflict":        provider.ErrConflict,
	"capacity":        provider.ErrCapacity,
	"unauthenticated": provider.ErrUnauthenticated,
	"precondition":    provider.ErrPrecondition,
	"transient":       provider.ErrTransient,
}

// ParseResponse decodes one response: exactly one JSON object with the
// protocol version crabbox speaks. A reported error becomes a Go error
// (wrapping the portable kind the program named, if any).
func ParseResponse(data []byte) (Response, error) {
	var r Response
	if len(data) > MaxResponseBytes {
		return r, fmt.Errorf("response is larger than %d bytes", MaxResponseBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return r, errors.New("empty response: want one JSON object on stdout")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return Response{}, fmt.Errorf("malformed response: %w", jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Response{}, errors.New("malformed response: more than one JSON value on stdout")
	}
	if r.ProtocolVersion != ProtocolVersion {
		return Response{}, fmt.Errorf("response field protocolVersion is %d, want %d", r.ProtocolVersion, ProtocolVersion)
	}
	if r.Error != "" || r.ErrorKind != "" {
		msg := r.Error
		if msg == "" {
			msg = "(no message)"
		}
		if r.ErrorKind == "" {
			return r, fmt.Errorf("program reported: %s", msg)
		}
		kind, ok := errorKinds[r.ErrorKind]
		if !ok {
			return r, fmt.Errorf("program reported: %s (and an unknown errorKind %q)", msg, r.ErrorKind)
		}
		return r, fmt.Errorf("program reported: %s: %w", msg, kind)
	}
	return r, nil
}

// jsonError names the field a type error is about.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return err
}

// ParseRunEvent decodes one line of a run stream.
func ParseRunEvent(line []byte) (RunEvent, error) {
	var ev RunEvent
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&ev); err != nil {
		return RunEvent{}, fmt.Errorf("malformed run output line: %w", jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return RunEvent{}, errors.New("malformed run output line: more than one JSON value")
	}
	switch {
	case ev.Error != "":
		return ev, nil
	case ev.ExitCode != nil:
		if ev.Stream != "" || ev.Data != "" {
			return RunEvent{}, errors.New("run output line has both exitCode and stream")
		}
		if *ev.ExitCode < 0 || *ev.ExitCode > 255 {
			return RunEvent{}, fmt.Errorf("run output field exitCode is %d, want 0-255", *ev.ExitCode)
		}
	case ev.Stream != "stdout" && ev.Stream != "stderr":
		return RunEvent{}, fmt.Errorf("run output field stream is %q, want \"stdout\" or \"stderr\"", ev.Stream)
	}
	return ev, nil
}

// LeaseName is the name crabbox asks a program to give a box:
// crabbox-<slug>-<8 hex derived from the lease ID>, the same for every
// acquire of the same lease.
func LeaseName(leaseID, slug string) string {
	sum := sha256.Sum256([]byte(leaseID))
	return "crabbox-" + slug + "-" + hex.EncodeToString(sum[:4])
}

// expect is what crabbox knows about the lease a response must describe.
type expect struct {
	leaseID string // exact lease ID, or "" for any well-formed one
	slug    string // exact slug, or ""
	ssh     bool   // SSH coordinates are required
}

// checkLease validates a lease object from a program. field names the
// object in errors ("lease", "leases[2]").
func checkLease(field string, l *Lease, want expect) error {
	if l == nil {
		return fmt.Errorf("response has no field %s", field)
	}
	switch {
	case l.LeaseID == "":
		return fmt.Errorf("%s.leaseId is missing", field)
	case want.leaseID != "" && l.LeaseID != want.leaseID:
		return fmt.Errorf("%s.leaseId is %q, want the ID crabbox sent, %q", field, l.LeaseID, want.leaseID)
	case !lease.IsID(l.LeaseID):
		return fmt.Errorf("%s.leaseId %q is malformed: want cbx_ and 12 lowercase hex digits", field, l.LeaseID)
	case l.Slug == "":
		return fmt.Errorf("%s.slug is missing", field)
	case want.slug != "" && l.Slug != want.slug:
		return fmt.Errorf("%s.slug is %q, want %q", field, l.Slug, want.slug)
	case !lease.ValidSlug(l.Slug):
		return fmt.Errorf("%s.slug %q is malformed (lowercase letters, digits and dashes, at most 41)", field, l.Slug)
	}
	for _, k := range []string{LabelLease, LabelSlug, LabelName} {
		v, ok := l.Labels[k]
		if !ok {
			continue
		}
		if wantV := reservedLabel(k, l); v != wantV {
			return fmt.Errorf("%s.labels.%s is %q, want %q (label %q is reserved for crabbox)", field, k, v, wantV, k)
		}
	}
	if l.SSH == nil || l.SSH.Host == "" {
		if want.ssh {
			return fmt.Errorf("%s.ssh.host is missing: the lease has no SSH coordinates", field)
		}
		if l.SSH != nil && (l.SSH.User != "" || l.SSH.Port != 0 || l.SSH.Key != "" || l.SSH.HostKey != "") {
			return fmt.Errorf("%s.ssh.host is missing but other SSH fields are set", field)
		}
		return nil
	}
	return checkSSH(field+".ssh", l.SSH, l.WorkRoot, field+".workRoot")
}

func checkSSH(field string, s *SSH, workRoot, workRootField string) error {
	switch {
	case strings.ContainsAny(s.Host, " \t\r\n/@"):
		return fmt.Errorf("%s.host %q is not a host name or address", field, s.Host)
	case s.Port < 0 || s.Port > 65535:
		return fmt.Errorf("%s.port %d is out of range 1-65535", field, s.Port)
	case s.User == "":
		return fmt.Errorf("%s.user is missing", field)
	case s.Key != "" && !isAbs(s.Key):
		return fmt.Errorf("%s.key %q is not an absolute path to a private key file", field, s.Key)
	case workRoot != "" && !path.IsAbs(workRoot):
		return fmt.Errorf("%s %q is not an absolute path on the box", workRootField, workRoot)
	}
	for i, p := range s.FallbackPorts {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("%s.fallbackPorts[%d] %d is out of range 1-65535", field, i, p)
		}
	}
	if s.HostKey != "" {
		if _, err := lease.ParsePublicKey(s.HostKey); err != nil {
			return fmt.Errorf("%s.hostKey is not an authorized_keys line: %w", field, err)
		}
	}
	return nil
}

// isAbs accepts absolute paths of any client OS (the key is a local file).
func isAbs(p string) bool {
	return path.IsAbs(p) || (len(p) > 2 && p[1] == ':' && (p[2] == '\\' || p[2] == '/')) || strings.HasPrefix(p, `\\`)
}

func reservedLabel(k string, l *Lease) string {
	switch k {
	case LabelLease:
		return l.LeaseID
	case LabelSlug:
		return l.Slug
	default:
		return LeaseName(l.LeaseID, l.Slug)
	}
}
