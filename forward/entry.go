package forward

import "time"

// Entry is one accepted delivery waiting to be forwarded to one route. An
// accepted delivery has an entry for each route it matched. Entries of one
// resource are created in version order (the stale rule refuses anything
// else), so their outbox order is their version order.
type Entry struct {
	Seq         uint64            `json:"-"` // the entry's position in the outbox, which identifies it
	Source      string            `json:"source"`
	Route       string            `json:"route"`
	RequestID   string            `json:"request_id"`
	Resource    string            `json:"resource,omitempty"`
	Version     string            `json:"version,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	// Trace is the W3C traceparent of the accepting request's span; the
	// forwarder's attempts are its children. Empty when tracing was off.
	Trace         string     `json:"trace,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastStatus    int        `json:"last_status,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	DeadAt        *time.Time `json:"dead_at,omitempty"`
	// BodyLost marks a dead letter whose payload expired before it was
	// forwarded: there is nothing left to send.
	BodyLost bool   `json:"body_lost,omitempty"`
	Body     []byte `json:"-"` // nil when not read or no longer held; an empty body is empty, not nil
}

// Target is one route of one source: where entries go. Lanes, claims,
// concurrency and dead letters are per target, so that a slow or failing
// route holds up nothing of another's.
type Target struct {
	Source string
	Route  string
}

// Target returns where e goes.
func (e *Entry) Target() Target { return Target{Source: e.Source, Route: e.Route} }

func (t Target) String() string { return t.Source + "/" + t.Route }
