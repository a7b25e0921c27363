package forward

import "time"

// Entry is one accepted delivery waiting to be forwarded. Entries of one
// resource are created in version order (the stale rule refuses anything
// else), so their outbox order is their version order.
type Entry struct {
	Seq           uint64            `json:"-"` // the entry's position in the outbox, which identifies it
	Source        string            `json:"source"`
	RequestID     string            `json:"request_id"`
	Resource      string            `json:"resource,omitempty"`
	Version       string            `json:"version,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	LastStatus    int               `json:"last_status,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	DeadAt        *time.Time        `json:"dead_at,omitempty"`
	// BodyLost marks a dead letter whose payload expired before it was
	// forwarded: there is nothing left to send.
	BodyLost bool   `json:"body_lost,omitempty"`
	Body     []byte `json:"-"` // nil when not read or no longer held; an empty body is empty, not nil
}
