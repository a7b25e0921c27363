// Package jsonenc appends JSON strings and times byte for byte as
// encoding/json writes them. The store's records, the outbox entries and
// the gateway's answer are written on every request, where encoding/json's
// reflection cost microseconds; their hand-written encoders quote strings
// and times here, and their tests compare them with encoding/json.
package jsonenc
