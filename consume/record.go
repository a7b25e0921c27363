package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is Lookup's answer for a key that is not recorded: never
// applied, failed (an apply error records nothing), or removed by Cleanup.
var ErrNotFound = errors.New("consume: key not recorded")

// Record is the evidence of one processed key.
type Record struct {
	Consumer string
	Key      string
	Source   string
	Route    string
	Resource string
	Version  string
	Attempt  int
	Decision Decision // Applied or Stale; a duplicate adds no record
	At       time.Time
	// Risks is what the record does not guarantee.
	Risks []string
}

// Lookup returns the record of (consumer, key).
func (c *Consumer) Lookup(ctx context.Context, consumer, key string) (Record, error) {
	var r Record
	var decision string
	var at int64
	err := c.db.QueryRowContext(ctx, c.sql.lookup, consumer, key).Scan(
		&r.Consumer, &r.Key, &r.Source, &r.Route, &r.Resource, &r.Version, &r.Attempt, &decision, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("consume: lookup: %w", err)
	}
	r.Decision = Decision(decision)
	r.At = time.UnixMicro(at).UTC()
	r.Risks = c.risks(r)
	return r, nil
}

func (c *Consumer) risks(r Record) []string {
	risks := []string{
		"effects outside the transaction (an e-mail, another HTTP call, a message to a broker) are not covered: they may have happened for a failed attempt too, and need their own outbox",
		"the key is forgotten once Cleanup removes it: a delivery of it after that applies again",
	}
	if r.Decision == Stale {
		risks = append(risks, "a stale delivery was not applied: its effect relies on the newer version that was")
	}
	if c.versions == "" || r.Resource == "" || r.Version == "" {
		risks = append(risks, "no stale guard: order between versions of a resource is webhookd's alone")
	}
	return risks
}

// Cleanup deletes the keys, and the stale guard's versions, recorded more
// than retention ago, in batches of at most batch rows, each its own
// statement, so that no delete holds locks on a large part of the table.
// It returns how many keys it deleted. The retention must exceed
// webhookd's receipt_ttl plus its longest retry schedule (see
// docs/consumer.md): a key deleted sooner can be delivered again and
// applied twice.
func (c *Consumer) Cleanup(ctx context.Context, retention time.Duration, batch int) (int64, error) {
	if retention <= 0 || batch <= 0 {
		return 0, fmt.Errorf("consume: cleanup needs a positive retention and batch, got %s and %d", retention, batch)
	}
	cutoff := c.now().Add(-retention).UnixMicro()
	keys, err := c.deleteBatches(ctx, c.sql.cleanKeys, cutoff, batch)
	if err != nil {
		return keys, err
	}
	_, err = c.deleteBatches(ctx, c.sql.cleanVersions, cutoff, batch)
	return keys, err
}

func (c *Consumer) deleteBatches(ctx context.Context, stmt string, cutoff int64, batch int) (int64, error) {
	var total int64
	for {
		res, err := c.db.ExecContext(ctx, stmt, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("consume: cleanup: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("consume: cleanup: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
