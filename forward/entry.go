package forward

import "time"

// Entry is one accepted delivery waiting to be forwarded. Entries of one
// resource are created in version order (the stale rule refuses anything
// else), so their outbox order is their version order.
type Entry struct {
	Seq           uint64            `json:"-"` // outbox position, from the key
	Source        string            `json:"source"`
	RequestID     string            `json:"request_id"`
	Resource      string            `json:"resource,omitempty"`
	Version       string            `json:"version,omitempty"`
	Body          []byte            `json:"body"`
	ContentType   string            `json:"content_type,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	LastStatus    int               `json:"last_status,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
}
