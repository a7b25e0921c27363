package versioning

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Format is how a source writes its versions.
type Format string

const (
	// Integer versions are non-negative whole numbers, as JSON numbers or
	// numeric strings.
	Integer Format = "integer"
	// Timestamp versions are RFC 3339 times; later is newer.
	Timestamp Format = "timestamp"
)

// ErrInvalid is wrapped by every Parse error.
var ErrInvalid = errors.New("invalid version")

// Parse returns the order key of raw in format f. Keys of one format compare
// like the versions they stand for.
func Parse(f Format, raw string) (uint64, error) {
	switch f {
	case Integer:
		return parseInteger(raw)
	case Timestamp:
		return parseTimestamp(raw)
	}
	return 0, fmt.Errorf("%w: unknown format %q", ErrInvalid, f)
}

func parseInteger(raw string) (uint64, error) {
	if raw == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if raw[0] == '-' {
		return 0, fmt.Errorf("%w: %q is negative", ErrInvalid, raw)
	}
	// ParseUint alone would take "+1" and "0x1f"; only plain digits are a version.
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, fmt.Errorf("%w: %q is not a non-negative integer", ErrInvalid, raw)
		}
	}
	n, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is out of range", ErrInvalid, raw)
	}
	return n, nil
}

// UnixNano is defined for years 1678 to 2262; outside that the order key
// would wrap, so such times are refused rather than misordered.
var (
	minTime = time.Unix(0, -1<<63).UTC()
	maxTime = time.Unix(0, 1<<63-1).UTC()
)

func parseTimestamp(raw string) (uint64, error) {
	// RFC 3339 lets "T" and "Z" be lower case; Go's layout takes upper case only.
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(raw))
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an RFC 3339 timestamp", ErrInvalid, raw)
	}
	// Go also takes a comma before the fraction, which RFC 3339 does not.
	if strings.IndexByte(raw, ',') >= 0 {
		return 0, fmt.Errorf("%w: %q is not an RFC 3339 timestamp", ErrInvalid, raw)
	}
	// Go drops digits past the nanosecond, which would make two different
	// times one order key and the later one stale: refuse what cannot be ordered.
	if fraction(raw) > 9 {
		return 0, fmt.Errorf("%w: %q has more than nine decimals of a second", ErrInvalid, raw)
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("%w: %q is out of range", ErrInvalid, raw)
	}
	// Flipping the sign bit maps int64 order onto uint64 order.
	return uint64(t.UnixNano()) ^ (1 << 63), nil
}

// fraction counts the digits after the seconds of a parsed RFC 3339 time.
func fraction(raw string) int {
	i := strings.IndexByte(raw, '.')
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range []byte(raw[i+1:]) {
		if c < '0' || c > '9' {
			break
		}
		n++
	}
	return n
}

// Latest is the latest accepted version of one resource.
type Latest struct {
	Version   string    `json:"version"` // as the sender gave it
	Order     uint64    `json:"order"`
	RequestID string    `json:"request_id"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Ordering is what the stale rule says about a new request's version.
type Ordering string

const (
	// First: the resource has no accepted version yet.
	First Ordering = "first"
	// Newer: the version is greater than the latest accepted one.
	Newer Ordering = "newer"
	// Tie: the version equals the latest accepted one, and the source
	// accepts ties (TiesAccept).
	Tie Ordering = "tie"
	// Stale: the version is lower than the latest accepted one, or equal
	// to it where the source does not accept ties.
	Stale Ordering = "stale"
	// Unordered: the delivery has no version, so there is nothing to order.
	Unordered Ordering = "unordered"
)

// Ties is what a source's stale rule does with a version equal to the
// latest accepted one.
type Ties string

const (
	// TiesStale refuses a tie: only a greater version is applied.
	TiesStale Ties = "stale"
	// TiesAccept applies a tie after the latest accepted version, in the
	// order deliveries arrive. It is for versions too coarse to tell two
	// changes apart (timestamps to the second): refusing ties there drops
	// every change after the first within one tick, and arrival order is
	// the best any receiver can do between versions that compare equal.
	TiesAccept Ties = "accept"
)

// Order applies the stale rule. latest is nil when the resource is new;
// acceptTies is set when the source accepts ties (TiesAccept).
func Order(latest *Latest, order uint64, acceptTies bool) Ordering {
	switch {
	case latest == nil:
		return First
	case order > latest.Order:
		return Newer
	case order == latest.Order && acceptTies:
		return Tie
	default:
		return Stale
	}
}
