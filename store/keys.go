package store

import (
	"encoding/binary"
	"time"
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
func deadKey(source, requestID string) []byte    { return pairKey(prefixDead, source, requestID) }
func payloadKey(source, requestID string) []byte { return pairKey(prefixPayload, source, requestID) }

// forwardKey is the key of the forward status of the receipt of requestID
// first seen at firstSeen. The status can outlive its receipt (see
// setForward), and a later receipt under the same request ID has a key
// of its own, which settling the earlier one's outbox entry leaves alone.
func forwardKey(source, requestID string, firstSeen time.Time) []byte {
	k := append(pairKey(prefixForward, source, requestID), 0)
	k = binary.BigEndian.AppendUint64(k, uint64(firstSeen.Unix()))
	return binary.BigEndian.AppendUint32(k, uint32(firstSeen.Nanosecond()))
}

// sourcePrefix is the key prefix of one source's keys under prefix, or of
// every source's when source is "".
func sourcePrefix(prefix byte, source string) []byte {
	if source == "" {
		return []byte{prefix}
	}
	return pairKey(prefix, source, "")
}

func outboxKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixOutbox
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}
