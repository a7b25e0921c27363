package store

import "encoding/binary"

const (
	prefixReceipt = 'r'
	prefixLatest  = 'v'
	prefixOutbox  = 'o'
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

func outboxKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixOutbox
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}
