package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/webhookd/webhookd/store/storetest"
)

// Size counts webhookd's tables in its own schema, with their indexes and
// TOAST data, and grows with what they hold.
func TestSizeIsTheTablesOnDisk(t *testing.T) {
	s := openTest(t, storetest.Config{Dir: t.TempDir()})
	empty, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n, body = 200, 4 << 10
	for i := range n {
		b := make([]byte, body/2)
		rand.Read(b)
		if _, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i), "", 0, hex.EncodeToString(b))); err != nil {
			t.Fatal(err)
		}
	}
	full, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The test's schema holds webhookd's tables and nothing else.
	var schema int64
	err = s.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(oid))::bigint FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'`).Scan(&schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("empty: %d bytes; after %d bodies of %d bytes: %d; the schema's tables: %d", empty, n, body, full, schema)
	if full != schema {
		t.Errorf("Size says %d bytes, the schema's tables take %d", full, schema)
	}
	// Random hex compresses to about half; TOAST may compress it.
	if full-empty < n*body/2 {
		t.Errorf("after %d bytes of bodies Size grew from %d to %d", n*body, empty, full)
	}
}
