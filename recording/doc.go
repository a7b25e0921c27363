// Package recording is the format of a recording of webhook deliveries and
// its writer and reader.
//
// A recording is JSON Lines, one [Record] per request, in arrival order:
// the request as it came (method, path, headers, body) and what webhookd
// answered (status and decision). A [FileRecorder] writes recordings off the
// decision path; [Reader] reads them back, hand-written lines included. The
// replay tool sends them to a webhookd again.
package recording
