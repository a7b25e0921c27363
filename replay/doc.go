// Package replay replays recordings (package recording) against any
// webhookd, so that a change to the configuration or the code can be tested
// on what providers actually send: a [Runner] sends each line to a target
// and compares its answers with the recorded ones, producing a [Report].
//
// Recorded signatures have aged out of every receiver's tolerance, so a
// runner given the target's configuration re-signs each delivery with its
// source's scheme and first secret before sending it.
package replay
