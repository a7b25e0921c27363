package signature

import (
	"fmt"
	"strings"
)

// Reason says why a delivery failed verification. Its values are stable
// strings because the HTTP layer sends them to clients.
type Reason string

// Verification failure reasons.
const (
	ReasonMissing   Reason = "missing_signature"          // signature (or timestamp/id) header absent
	ReasonMalformed Reason = "malformed_signature"        // header present but unparsable
	ReasonMismatch  Reason = "signature_mismatch"         // no secret produced a matching signature
	ReasonTimestamp Reason = "timestamp_out_of_tolerance" // too old or too far in the future
)

// Error is the single error type Verify returns, so callers can map any
// failure to a response with one errors.As.
type Error struct {
	Reason Reason
	Header string // the header at fault, when there is one
	Msg    string // human detail; a default per Reason is used when empty
}

// Sentinels for errors.Is; they match any *Error with the same Reason.
var (
	ErrMissing   = &Error{Reason: ReasonMissing}
	ErrMalformed = &Error{Reason: ReasonMalformed}
	ErrMismatch  = &Error{Reason: ReasonMismatch}
	ErrTimestamp = &Error{Reason: ReasonTimestamp}
)

func (e *Error) Error() string {
	msg := e.Msg
	if msg == "" {
		switch e.Reason {
		case ReasonMissing:
			msg = "missing"
		case ReasonMalformed:
			msg = "malformed"
		case ReasonMismatch:
			msg = "signature does not match any configured secret"
		case ReasonTimestamp:
			msg = "timestamp outside the allowed tolerance"
		default:
			msg = string(e.Reason)
		}
	}
	if e.Header == "" {
		return "signature: " + msg
	}
	return fmt.Sprintf("signature: header %s: %s", e.Header, msg)
}

// Is compares only the Reason, so the sentinels match whatever header and
// detail a concrete failure carries.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

func missing(header string) error {
	return &Error{Reason: ReasonMissing, Header: header, Msg: "missing"}
}

// missingAny reports that none of names is there, blaming the first.
func missingAny(names []string) error {
	if len(names) == 1 {
		return missing(names[0])
	}
	return &Error{Reason: ReasonMissing, Header: names[0], Msg: "missing (and so is " + strings.Join(names[1:], ", ") + ")"}
}

func malformed(header string, err error) error {
	return &Error{Reason: ReasonMalformed, Header: header, Msg: "malformed: " + err.Error()}
}

func mismatch(header string) error {
	return &Error{Reason: ReasonMismatch, Header: header}
}
