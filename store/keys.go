package store

import (
	"encoding/binary"
	"strings"
	"time"

	"github.com/webhookd/webhookd/forward"
)

const (
	prefixReceipt = 'r'
	prefixLatest  = 'v'
	prefixOutbox  = 'o'
	prefixDead    = 'd'
	prefixPayload = 'p'
	prefixForward = 'f'
)

func pairKey(prefix byte, a, b string) []byte {
	k := make([]byte, 0, 2+len(a)+len(b))
	k = append(k, prefix)
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

func receiptKey(source, requestID string) []byte { return pairKey(prefixReceipt, source, requestID) }
func latestKey(source, resource string) []byte   { return pairKey(prefixLatest, source, resource) }
func payloadKey(source, requestID string) []byte { return pairKey(prefixPayload, source, requestID) }

// deadKey is the key of a dead letter of one route: source, route and
// request ID, so that a source's dead letters, and a route's, are a
// prefix (targetPrefix).
func deadKey(tg forward.Target, requestID string) []byte {
	k := append(pairKey(prefixDead, tg.Source, tg.Route), 0)
	return append(k, requestID...)
}

// deadTarget returns the target named by a dead letter's key.
func deadTarget(key []byte) forward.Target {
	source, rest, _ := strings.Cut(string(key[1:]), "\x00")
	route, _, _ := strings.Cut(rest, "\x00")
	return forward.Target{Source: source, Route: route}
}

// forwardKey is the key of the forward status, on route, of the receipt
// of requestID first seen at firstSeen. The status can outlive its
// receipt (see setForward), and a later receipt under the same request ID
// has keys of its own, which settling the earlier one's outbox entries
// leaves alone. The route goes last, after the fixed-size time, so that
// no route's key is read as another's.
func forwardKey(source, requestID string, firstSeen time.Time, route string) []byte {
	k := append(pairKey(prefixForward, source, requestID), 0)
	k = binary.BigEndian.AppendUint64(k, uint64(firstSeen.Unix()))
	k = binary.BigEndian.AppendUint32(k, uint32(firstSeen.Nanosecond()))
	return append(k, route...)
}

// targetPrefix is the key prefix of a target's keys under prefix, keyed
// source, route, then more: an empty Route is every route of the source,
// an empty Source every key.
func targetPrefix(prefix byte, tg forward.Target) []byte {
	switch {
	case tg.Source == "":
		return []byte{prefix}
	case tg.Route == "":
		return pairKey(prefix, tg.Source, "")
	}
	return append(pairKey(prefix, tg.Source, tg.Route), 0)
}

func outboxKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixOutbox
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}
