// Package jsonenc appends JSON strings byte for byte as encoding/json
// writes them. The gateway's answer is written by hand on every request,
// where encoding/json's reflection costs microseconds; its tests compare
// the answer with encoding/json's.
package jsonenc
