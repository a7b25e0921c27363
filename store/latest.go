package store

import "github.com/webhookd/webhookd/versioning"

// latestCacheSize is how many resources' latest versions the writer keeps in
// memory, per generation (see latestCache).
const latestCacheSize = 1 << 16

// latestCache holds the latest versions the writer read or committed lately.
// A resource's key is rewritten at every accepted version, so older copies
// of it sit in most LSM levels, and Badger's Get searches every level even
// after a memtable hit.
//
// Only the writer goroutine uses it. It holds committed values only: what a
// batch writes waits in staged until the batch commits, and is dropped if
// it does not. Two generations bound it: when cur is full it becomes prev,
// and a hit in prev moves the entry back to cur, so resources in use stay.
type latestCache struct {
	max       int
	cur, prev map[string]versioning.Latest
	staged    map[string]versioning.Latest
}

func newLatestCache(max int) *latestCache {
	return &latestCache{
		max:    max,
		cur:    make(map[string]versioning.Latest),
		prev:   make(map[string]versioning.Latest),
		staged: make(map[string]versioning.Latest),
	}
}

// get returns the latest version at key as the batch being staged sees it.
func (c *latestCache) get(key string) (versioning.Latest, bool) {
	if l, ok := c.staged[key]; ok {
		return l, true
	}
	if l, ok := c.cur[key]; ok {
		return l, true
	}
	l, ok := c.prev[key]
	if ok {
		c.put(key, l)
	}
	return l, ok
}

// put records a committed value.
func (c *latestCache) put(key string, l versioning.Latest) {
	if len(c.cur) >= c.max {
		c.prev, c.cur = c.cur, make(map[string]versioning.Latest, len(c.cur))
	}
	c.cur[key] = l
}

// stage records a value the batch being staged writes.
func (c *latestCache) stage(key string, l versioning.Latest) { c.staged[key] = l }

// committed keeps what the batch wrote; discard forgets it.
func (c *latestCache) committed() {
	for k, l := range c.staged {
		c.put(k, l)
	}
	c.discard()
}

func (c *latestCache) discard() { clear(c.staged) }

// reset forgets everything.
func (c *latestCache) reset() {
	clear(c.cur)
	clear(c.prev)
	c.discard()
}
