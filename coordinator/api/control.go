package api

import (
	"encoding/json"
	"time"
)

// The control websocket (GET /v1/control) carries lease heartbeats and live
// run events over one authenticated connection. Every message either way is
// one JSON text frame, a ControlMessage with Type set.
const (
	// ControlProtocol is the protocol number the coordinator's hello
	// carries.
	ControlProtocol = 1

	// Messages a client sends.
	ControlHeartbeat    = "heartbeat"     // leaseID, expectedProvider, idleTimeoutSeconds, telemetry
	ControlSubscribeRun = "subscribe_run" // runID, after, limit
	ControlAck          = "ack"           // runID, seq
	ControlPing         = "ping"

	// Messages the coordinator sends (and "heartbeat", the answer to one).
	ControlHello     = "hello"      // protocol, clientID
	ControlRunEvents = "run_events" // runID, events, nextSeq
	ControlPong      = "pong"
	ControlError     = "error" // code, message (and runID for a refused subscription)

	// MaxControlMessageBytes bounds one message a client sends; a larger
	// one closes the connection (status 1009).
	MaxControlMessageBytes = 64 << 10
	// DefaultControlEventLimit and MaxControlEventLimit bound the events
	// of one run_events message.
	DefaultControlEventLimit = 100
	MaxControlEventLimit     = 500
)

// Error codes only the control websocket uses.
const (
	// CodeWebsocketRequired: GET /v1/control without a websocket upgrade (426).
	CodeWebsocketRequired = "websocket_required"
	// CodeInvalidJSON and CodeInvalidMessage: a message that is not JSON
	// text; CodeUnknownType: a type the coordinator does not know.
	CodeInvalidJSON    = "invalid_json"
	CodeInvalidMessage = "invalid_message"
	CodeUnknownType    = "unknown_type"
)

// ControlMessage is every message of the control websocket; which fields
// are set depends on Type. Field names and JSON types are those of the
// upstream crabbox CLI's control messages, so it reads ours.
type ControlMessage struct {
	Type     string `json:"type"`
	Protocol int    `json:"protocol,omitempty"`
	ClientID string `json:"clientID,omitempty"`

	// subscribe_run, ack and run_events.
	RunID   string  `json:"runID,omitempty"`
	After   int64   `json:"after,omitempty"`
	Limit   int     `json:"limit,omitempty"`
	Seq     int64   `json:"seq,omitempty"`
	Events  []Event `json:"events,omitempty"`
	NextSeq int64   `json:"nextSeq,omitempty"`

	// heartbeat, both ways. The answer has OK and ExpiresAt, and Lease
	// (the record POST /v1/leases/{id}/heartbeat answers); a refused one
	// has Error and Code (the same code as the HTTP route), Message and
	// Status (the HTTP route's status).
	LeaseID            string          `json:"leaseID,omitempty"`
	ExpectedProvider   string          `json:"expectedProvider,omitempty"`
	IdleTimeoutSeconds int             `json:"idleTimeoutSeconds,omitempty"`
	Telemetry          json.RawMessage `json:"telemetry,omitempty"`
	OK                 bool            `json:"ok,omitempty"`
	ExpiresAt          *time.Time      `json:"expiresAt,omitempty"`
	Lease              *Lease          `json:"lease,omitempty"`
	Status             int             `json:"status,omitempty"`

	// error, and refused heartbeats.
	Code    string `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}
