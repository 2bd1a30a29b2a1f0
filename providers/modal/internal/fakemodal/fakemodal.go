//go:build unix

// Package fakemodal (Unix only) is a fake of Modal's gRPC API for tests: a server on
// loopback implementing the control-plane service modal.client.ModalClient
// and the per-task command router modal.task_command_router.TaskCommandRouter
// as Modal publishes them in its protobuf definitions (modal-labs/modal-client,
// modal_proto/api.proto and modal_proto/task_command_router.proto, as
// generated into github.com/modal-labs/modal-client/go@v0.11.1,
// proto/modal_proto). It implements only the RPCs Modal's Go SDK calls on
// crabbox's paths (the rest answer Unimplemented): AuthTokenGet,
// EnvironmentGetOrCreate, AppGetOrCreate, ImageGetOrCreate, SandboxCreate,
// SandboxGetTaskId, TaskGetCommandRouterAccess, SandboxList (paged by
// before_timestamp, filtered by tags), SandboxTagsGet, SandboxTerminate,
// SandboxWait, and on the router TaskExecStart, TaskExecStdioRead,
// TaskExecStdinWrite, TaskExecWait and TaskExecPoll.
//
// Each sandbox is a directory on this machine; each exec is a local
// process in its own process group, ended with the sandbox.
package fakemodal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// PageSize is how many sandboxes one SandboxList answer holds at most.
const PageSize = 2

// Server is the fake.
type Server struct {
	// TokenID and TokenSecret are the credentials every control-plane
	// request must carry.
	TokenID, TokenSecret string

	root string
	lis  net.Listener
	srv  *grpc.Server

	mu        sync.Mutex
	seq       int
	created   float64
	sandboxes map[string]*sandbox // by sandbox ID
	tasks     map[string]*sandbox // by task ID
	apps      map[string]string
	calls     []string
	failNext  map[string]error
	wg        sync.WaitGroup
}

type sandbox struct {
	id, task, dir string
	app           string
	created       float64
	tags          map[string]string
	timeout, idle uint32
	done          bool
	execs         map[string]*execution
}

type execution struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	written  uint64
	out, err *stream
	exited   chan struct{}
	state    *os.ProcessState
}

// stream is an output pipe's bytes so far.
type stream struct {
	mu      sync.Mutex
	data    []byte
	closed  bool
	changed chan struct{}
}

func newStream() *stream { return &stream{changed: make(chan struct{})} }

func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = append(s.data, p...)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.changed)
	s.changed = make(chan struct{})
}

// from returns the bytes from offset, whether the stream is closed, and a
// channel closed on the next change.
func (s *stream) from(off uint64) ([]byte, bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off > uint64(len(s.data)) {
		off = uint64(len(s.data))
	}
	return slices.Clone(s.data[off:]), s.closed, s.changed
}

// Start serves the fake on 127.0.0.1 with sandboxes under root.
func Start(root, tokenID, tokenSecret string) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{TokenID: tokenID, TokenSecret: tokenSecret, root: root, lis: lis,
		sandboxes: map[string]*sandbox{}, tasks: map[string]*sandbox{}, apps: map[string]string{}, failNext: map[string]error{}}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(s.unary), grpc.StreamInterceptor(s.stream))
	pb.RegisterModalClientServer(s.srv, control{s: s})
	pb.RegisterTaskCommandRouterServer(s.srv, router{s: s})
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = s.srv.Serve(lis) }()
	return s, nil
}

// URL is the server URL to give the SDK (http, loopback).
func (s *Server) URL() string { return "http://" + s.lis.Addr().String() }

// Close terminates every sandbox and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	for _, sb := range s.sandboxes {
		s.terminateLocked(sb)
	}
	s.mu.Unlock()
	s.srv.Stop()
	s.wg.Wait()
}

// Calls returns the RPC method names received so far.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// FailNext makes the next call of method (its short name, such as
// "TaskExecStart") fail with err.
func (s *Server) FailNext(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[method] = err
}

// Live returns the IDs of the sandboxes not terminated.
func (s *Server) Live() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, sb := range s.sandboxes {
		if !sb.done {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Sandbox returns the tags, timeout and idle timeout of sandbox id.
func (s *Server) Sandbox(id string) (tags map[string]string, timeout, idle time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return nil, 0, 0, false
	}
	return cloneMap(sb.tags), time.Duration(sb.timeout) * time.Second, time.Duration(sb.idle) * time.Second, true
}

// AddSandbox makes a sandbox with tags, as another client would.
func (s *Server) AddSandbox(tags map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newSandboxLocked("ap-other", tags, 300, 0).id
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func short(full string) string { return full[lastSlash(full)+1:] }

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// check records the call, answers an injected failure, and checks the
// credentials: the control plane's token headers, the router's JWT.
func (s *Server) check(ctx context.Context, full string) error {
	m := short(full)
	s.mu.Lock()
	s.calls = append(s.calls, m)
	err, fail := s.failNext[m]
	delete(s.failNext, m)
	s.mu.Unlock()
	if fail {
		return err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if filepath.Dir(full) == "/modal.task_command_router.TaskCommandRouter" {
		if a := md.Get("authorization"); len(a) != 1 || len(a[0]) < 8 {
			return status.Error(codes.Unauthenticated, "missing router JWT")
		}
		return nil
	}
	// The SDK's interceptors may append the headers more than once; every
	// copy must be right.
	id, sec := md.Get("x-modal-token-id"), md.Get("x-modal-token-secret")
	ok := len(id) > 0 && len(sec) > 0
	for _, v := range id {
		ok = ok && v == s.TokenID
	}
	for _, v := range sec {
		ok = ok && v == s.TokenSecret
	}
	if !ok {
		return status.Errorf(codes.Unauthenticated, "Token missing or invalid (%d id, %d secret headers on %s)", len(id), len(sec), m)
	}
	return nil
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

func (s *Server) newSandboxLocked(app string, tags map[string]string, timeout, idle uint32) *sandbox {
	s.seq++
	s.created++
	id := fmt.Sprintf("sb-%06d", s.seq)
	sb := &sandbox{id: id, task: fmt.Sprintf("ta-%06d", s.seq), dir: filepath.Join(s.root, id), app: app,
		created: s.created, tags: tags, timeout: timeout, idle: idle, execs: map[string]*execution{}}
	_ = os.MkdirAll(sb.dir, 0o755)
	s.sandboxes[id], s.tasks[sb.task] = sb, sb
	return sb
}

func (s *Server) terminateLocked(sb *sandbox) {
	sb.done = true
	for _, e := range sb.execs {
		if e.cmd.Process != nil {
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

func tagMap(tags []*pb.SandboxTag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[t.GetTagName()] = t.GetTagValue()
	}
	return m
}

func tagList(m map[string]string) []*pb.SandboxTag {
	var out []*pb.SandboxTag
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: m[k]}.Build())
	}
	return out
}

// JWT is a token the SDK can parse: it reads only its exp claim.
func JWT(exp time.Time) string {
	enc := base64.RawURLEncoding
	claims, _ := json.Marshal(map[string]any{"exp": exp.Unix()})
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(claims) + "." + enc.EncodeToString([]byte("fake"))
}

type control struct {
	pb.UnimplementedModalClientServer
	s *Server
}

func (c control) AuthTokenGet(context.Context, *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	return pb.AuthTokenGetResponse_builder{Token: JWT(time.Now().Add(time.Hour))}.Build(), nil
}

func (c control) EnvironmentGetOrCreate(_ context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	return pb.EnvironmentGetOrCreateResponse_builder{EnvironmentId: "en-fake", Metadata: pb.EnvironmentMetadata_builder{
		Name: req.GetDeploymentName(), Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: "2025.06"}.Build(),
	}.Build()}.Build(), nil
}

func (c control) AppGetOrCreate(_ context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	id, ok := c.s.apps[req.GetAppName()]
	if !ok {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", req.GetAppName())
		}
		id = fmt.Sprintf("ap-%06d", len(c.s.apps)+1)
		c.s.apps[req.GetAppName()] = id
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

func (c control) ImageGetOrCreate(_ context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	return pb.ImageGetOrCreateResponse_builder{ImageId: "im-fake",
		Result: pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build()}.Build(), nil
}

func (c control) SandboxCreate(_ context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	d := req.GetDefinition()
	tags := tagMap(req.GetTags())
	if d.GetTimeoutSecs() > 24*3600 {
		return nil, status.Error(codes.InvalidArgument, "timeout must be at most 24 hours")
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb := c.s.newSandboxLocked(req.GetAppId(), tags, d.GetTimeoutSecs(), d.GetIdleTimeoutSecs())
	return pb.SandboxCreateResponse_builder{SandboxId: sb.id}.Build(), nil
}

func (c control) sandbox(id string) (*sandbox, error) {
	sb, ok := c.s.sandboxes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (c control) SandboxGetTaskId(_ context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb, err := c.sandbox(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if sb.done {
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: pb.GenericResult_builder{
			Status: pb.GenericResult_GENERIC_STATUS_TERMINATED, Exception: "Sandbox terminated"}.Build()}.Build(), nil
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: &sb.task}.Build(), nil
}

func (c control) TaskGetCommandRouterAccess(_ context.Context, req *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.s.tasks[req.GetTaskId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "task %s not found", req.GetTaskId())
	}
	return pb.TaskGetCommandRouterAccessResponse_builder{Jwt: JWT(time.Now().Add(time.Hour)),
		Url: "https://" + c.s.lis.Addr().String()}.Build(), nil
}

func (c control) SandboxList(_ context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	want := tagMap(req.GetTags())
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var all []*sandbox
	for _, sb := range c.s.sandboxes {
		if sb.done && !req.GetIncludeFinished() || req.GetAppId() != "" && sb.app != req.GetAppId() {
			continue
		}
		if b := req.GetBeforeTimestamp(); b != 0 && sb.created >= b {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && sb.tags[k] == v
		}
		if ok {
			all = append(all, sb)
		}
	}
	slices.SortFunc(all, func(a, b *sandbox) int { return -cmpFloat(a.created, b.created) })
	var out []*pb.SandboxInfo
	for _, sb := range all[:min(len(all), PageSize)] {
		out = append(out, pb.SandboxInfo_builder{Id: sb.id, CreatedAt: sb.created, AppId: sb.app, Tags: tagList(sb.tags)}.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (c control) SandboxTagsGet(_ context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb, err := c.sandbox(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxTagsGetResponse_builder{Tags: tagList(sb.tags)}.Build(), nil
}

func (c control) SandboxTerminate(_ context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb, err := c.sandbox(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.terminateLocked(sb)
	return &pb.SandboxTerminateResponse{}, nil
}

func (c control) SandboxWait(_ context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb, err := c.sandbox(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if !sb.done {
		return &pb.SandboxWaitResponse{}, nil
	}
	return pb.SandboxWaitResponse_builder{Result: pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}.Build()}.Build(), nil
}

type router struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

func (r router) exec(task, id string) (*sandbox, *execution, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	sb, ok := r.s.tasks[task]
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "task %s not found", task)
	}
	e, ok := sb.execs[id]
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "exec %s not found", id)
	}
	return sb, e, nil
}

func (r router) TaskExecStart(_ context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	args := req.GetCommandArgs()
	if len(args) == 0 {
		return nil, status.Error(codes.InvalidArgument, "empty command")
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	sb, ok := r.s.tasks[req.GetTaskId()]
	if !ok || sb.done {
		return nil, status.Errorf(codes.NotFound, "task %s not found or finished", req.GetTaskId())
	}
	if _, dup := sb.execs[req.GetExecId()]; dup {
		return nil, status.Errorf(codes.AlreadyExists, "exec %s exists", req.GetExecId())
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = sb.dir
	if req.HasWorkdir() {
		cmd.Dir = req.GetWorkdir()
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + sb.dir}
	for _, src := range req.GetSecretSources() {
		for k, v := range src.GetEnv().GetContents() {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e := &execution{cmd: cmd, out: newStream(), err: newStream(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = e.out, e.err
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	e.stdin = stdin
	if err := cmd.Start(); err != nil {
		e.out.close()
		e.err.close()
		_ = stdin.Close()
		return nil, status.Errorf(codes.InvalidArgument, "start %q: %v", args[0], err)
	}
	sb.execs[req.GetExecId()] = e
	r.s.wg.Add(1)
	go func() {
		defer r.s.wg.Done()
		_ = cmd.Wait()
		e.state = cmd.ProcessState
		e.out.close()
		e.err.close()
		close(e.exited)
	}()
	return &pb.TaskExecStartResponse{}, nil
}

func (r router) TaskExecStdinWrite(_ context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	data := req.GetData()
	if off := req.GetOffset(); off < e.written {
		skip := min(e.written-off, uint64(len(data)))
		data = data[skip:]
	}
	if len(data) > 0 {
		n, _ := e.stdin.Write(data)
		e.written += uint64(n)
	}
	if req.GetEof() {
		_ = e.stdin.Close()
	}
	return &pb.TaskExecStdinWriteResponse{}, nil
}

func (r router) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, ss grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	st := e.out
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		st = e.err
	}
	off := req.GetOffset()
	for {
		data, closed, changed := st.from(off)
		if len(data) > 0 {
			if err := ss.Send(pb.TaskExecStdioReadResponse_builder{Data: data}.Build()); err != nil {
				return err
			}
			off += uint64(len(data))
			continue
		}
		if closed {
			return nil
		}
		select {
		case <-changed:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
	}
}

func exitStatus(ps *os.ProcessState) (code, signal *int32) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		n := int32(ws.Signal())
		return nil, &n
	}
	n := int32(ps.ExitCode())
	return &n, nil
}

func (r router) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-e.exited:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	code, sig := exitStatus(e.state)
	return pb.TaskExecWaitResponse_builder{Code: code, Signal: sig}.Build(), nil
}

func (r router) TaskExecPoll(_ context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-e.exited:
	default:
		return &pb.TaskExecPollResponse{}, nil
	}
	code, sig := exitStatus(e.state)
	return pb.TaskExecPollResponse_builder{Code: code, Signal: sig}.Build(), nil
}

// The V2 sandbox backend's RPCs, which the SDK uses by default.

func (c control) SandboxCreateV2(_ context.Context, req *pb.SandboxCreateV2Request) (*pb.SandboxCreateV2Response, error) {
	d := req.GetDefinition()
	if d.GetTimeoutSecs() > 24*3600 {
		return nil, status.Error(codes.InvalidArgument, "timeout must be at most 24 hours")
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb := c.s.newSandboxLocked(req.GetAppId(), tagMap(req.GetTags()), d.GetTimeoutSecs(), d.GetIdleTimeoutSecs())
	return pb.SandboxCreateV2Response_builder{SandboxId: sb.id, TaskId: sb.task,
		CommandRouterAccess: pb.CommandRouterAccess_builder{Jwt: JWT(time.Now().Add(time.Hour)), Url: "https://" + c.s.lis.Addr().String()}.Build(),
	}.Build(), nil
}

func (c control) SandboxGetCommandRouterAccess(_ context.Context, req *pb.SandboxGetCommandRouterAccessRequest) (*pb.SandboxGetCommandRouterAccessResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, err := c.sandbox(req.GetSandboxId()); err != nil {
		return nil, err
	}
	return pb.SandboxGetCommandRouterAccessResponse_builder{Jwt: JWT(time.Now().Add(time.Hour)),
		Url: "https://" + c.s.lis.Addr().String()}.Build(), nil
}

func (c control) SandboxGetTaskIdV2(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	return c.SandboxGetTaskId(ctx, req)
}

func (c control) SandboxListV2(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	return c.SandboxList(ctx, req)
}

func (c control) SandboxTagsGetV2(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	return c.SandboxTagsGet(ctx, req)
}

func (c control) SandboxTerminateV2(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	return c.SandboxTerminate(ctx, req)
}

func (c control) SandboxWaitV2(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	return c.SandboxWait(ctx, req)
}
