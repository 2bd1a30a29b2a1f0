package api

// CodeNoBoxAccess: the coordinator cannot reach the lease's box itself
// (409): the lease's owner's client did not install the coordinator's
// access key on it (an older or the upstream client), or the coordinator
// has no secret to derive it from. The owner still reaches the box.
const CodeNoBoxAccess = "no_box_access"

// SSHRelayHostKeyHeader is the response header of GET
// /v1/leases/{id}/ssh's upgrade that carries the host key (authorized_keys
// form) the coordinator answers the lease's SSH with, so that a client can
// pin it before its handshake.
const SSHRelayHostKeyHeader = "X-Crabbox-SSH-Host-Key"
