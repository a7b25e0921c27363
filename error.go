package webhookd

import (
	"errors"
	"fmt"
)

// Error codes. The gateway maps each to one HTTP status, in one table.
const (
	EINVALID      = "invalid"
	ENOTFOUND     = "not_found"
	EMETHOD       = "method_not_allowed"
	ETOOLARGE     = "too_large"
	EUNSUPPORTED  = "unsupported"
	EUNAUTHORIZED = "unauthorized"
	ECONFLICT     = "conflict"
	EUNAVAILABLE  = "unavailable"
	EINTERNAL     = "internal"
)

// Error is an error meant for the caller: its Message is safe to show and,
// where one input field is at fault, Field names it.
type Error struct {
	Code    string
	Message string
	Field   string
	// Reason, when set, is a stable machine-readable detail of Code, such
	// as which signature check failed.
	Reason string
	// Err, when set, is the cause, for the log only: it may name files and
	// system errors that a caller must not see.
	Err error
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return fmt.Sprintf("webhookd: %s: %s", e.Code, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldErrorf returns an EINVALID *Error blaming one input field.
func FieldErrorf(field, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err if it is (or wraps) an *Error, and
// EINTERNAL otherwise: an error nobody classified is our fault.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-safe message of err; unclassified errors
// get a generic message so internals never leak to callers.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrorField returns the field an *Error blames, or "".
func ErrorField(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

// ErrorReason returns the Reason of an *Error, or "".
func ErrorReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}
