// Package replay records real webhook deliveries and replays them against
// any webhookd, so that a change to the configuration or the code can be
// tested on what providers actually send.
//
// A recording is JSON Lines, one [Record] per request, in arrival order:
// the request as it came (method, path, headers, body) and what webhookd
// answered (status and decision). A [FileRecorder] writes recordings off the
// decision path; [Reader] reads them back, hand-written lines included; a
// [Runner] sends them to a target and compares its answers with the
// recorded ones, producing a [Report].
//
// Recorded signatures have aged out of every receiver's tolerance, so a
// runner given the target's configuration re-signs each delivery with its
// source's scheme and first secret before sending it.
package replay
