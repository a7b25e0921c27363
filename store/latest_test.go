package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/versioning"
)

func TestLatestCacheHoldsCommittedValuesOnly(t *testing.T) {
	c := newLatestCache(8)
	v := func(n uint64) versioning.Latest { return versioning.Latest{Order: n} }
	c.put("a", v(1))
	c.stage("a", v(2))
	if l, _ := c.get("a"); l.Order != 2 {
		t.Fatalf("while staged: order %d, want the batch's own 2", l.Order)
	}
	c.discard()
	if l, _ := c.get("a"); l.Order != 1 {
		t.Fatalf("after discard: order %d, want the committed 1", l.Order)
	}
	c.stage("a", v(3))
	c.committed()
	if l, _ := c.get("a"); l.Order != 3 {
		t.Fatalf("after commit: order %d, want 3", l.Order)
	}
	c.reset()
	if _, ok := c.get("a"); ok {
		t.Fatal("after reset: still cached")
	}
}

func TestLatestCacheIsBoundedAndKeepsWhatIsUsed(t *testing.T) {
	c := newLatestCache(2)
	for _, k := range []string{"a", "b", "c"} { // c rotates a and b into prev
		c.put(k, versioning.Latest{})
	}
	if _, ok := c.get("a"); !ok { // back into cur, beside c
		t.Fatal("a lost after one rotation")
	}
	c.put("d", versioning.Latest{}) // cur {c, a} is full: it becomes prev
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s lost", k)
		}
	}
	if _, ok := c.get("b"); ok {
		t.Error("b, unused for two rotations, is still held")
	}
	if n := len(c.cur) + len(c.prev); n > 4 {
		t.Errorf("holds %d entries, at most 2 generations of 2", n)
	}
}

// An op that fails after staging a new latest version must leave no trace:
// neither the ops after it in the batch nor later batches may see it.
func TestFailedOpLeavesNoLatestVersion(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, versioned("req-1", "sub_1", 3))
	var got webhookd.Decision
	ops := []*op{
		{done: make(chan error, 1), stage: func(t *tx) error {
			if err := t.setLatest("billing", "sub_1", versioning.Latest{Version: "9", Order: 9}); err != nil {
				return err
			}
			return errors.New("refused after staging")
		}},
		{done: make(chan error, 1), stage: func(t *tx) error {
			out, err := s.stageDecision(t, ptr(versioned("req-2", "sub_1", 5)))
			got = out.Decision
			return err
		}},
	}
	s.apply(ops)
	if err := <-ops[0].done; err == nil {
		t.Fatal("the failing op succeeded")
	}
	if err := <-ops[1].done; err != nil {
		t.Fatal(err)
	}
	if got != webhookd.Accepted {
		t.Fatalf("version 5 after the failed op: %s, want accepted over version 3", got)
	}
	if out := mustDecide(t, s, versioned("req-3", "sub_1", 4)); out.Decision != webhookd.Stale || out.LatestVersion != "5" {
		t.Fatalf("version 4 in the next batch: %s (latest %s), want stale against 5", out.Decision, out.LatestVersion)
	}
}

// An op whose writes Badger refuses part-way through (here a key in
// Badger's own namespace, in production a value past Badger's size limit)
// must leave none of them, wherever it sits in its batch.
func TestOpRefusedPartWayLeavesNothing(t *testing.T) {
	for _, at := range []int{0, 1} {
		t.Run(fmt.Sprint("at ", at), func(t *testing.T) {
			s := openStore(t, t.TempDir())
			refused := &op{done: make(chan error, 1), stage: func(t *tx) error {
				if err := t.setLatest("billing", "sub_2", versioning.Latest{Version: "9", Order: 9}); err != nil {
					return err
				}
				t.setRaw([]byte("!badger!refused"), []byte("x"), 0)
				return nil
			}}
			accepted := &op{done: make(chan error, 1), stage: func(t *tx) error {
				_, err := s.stageDecision(t, ptr(versioned("req-1", "sub_1", 3)))
				return err
			}}
			ops := []*op{accepted}
			ops = slices.Insert(ops, at, refused)
			s.apply(ops)
			if err := <-refused.done; err == nil {
				t.Fatal("the refused op succeeded")
			}
			if err := <-accepted.done; err != nil {
				t.Fatalf("the op beside it: %v", err)
			}
			if l, err := s.Latest(ctx, "billing", "sub_2"); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
				t.Errorf("latest version of the refused op's resource: %+v, %v; want none", l, err)
			}
			if out := mustDecide(t, s, versioned("req-2", "sub_2", 4)); out.Decision != webhookd.Accepted {
				t.Errorf("version 4 of the refused op's resource: %s, want accepted", out.Decision)
			}
			if l, err := s.Latest(ctx, "billing", "sub_1"); err != nil || l.Version != "3" {
				t.Errorf("latest version of the accepted op's resource: %+v, %v; want 3", l, err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
