package consume_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/webhookd/webhookd/consume"
)

// A queue consumer applies a message once by its business ID, however
// often the broker delivers it.
func ExampleConsumer_Apply() {
	dir, _ := os.MkdirTemp("", "consume-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	defer db.Close()
	ctx := context.Background()
	db.Exec(`CREATE TABLE stock (sku TEXT PRIMARY KEY, quantity INTEGER NOT NULL)`)
	db.Exec(`INSERT INTO stock VALUES ('SKU-1', 100)`)

	c, err := consume.New(consume.Config{DB: db, Dialect: consume.SQLite})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.CreateSchema(ctx); err != nil {
		fmt.Println(err)
		return
	}
	reserve := func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
		_, err := tx.ExecContext(ctx, `UPDATE stock SET quantity = quantity - 3 WHERE sku = 'SKU-1'`)
		return err
	}
	msg := consume.Delivery{Key: "reservation-7", Source: "orders"}
	for range 2 {
		decision, err := c.Apply(ctx, "inventory", msg, reserve)
		fmt.Println(decision, err)
	}
	var left int
	db.QueryRow(`SELECT quantity FROM stock WHERE sku = 'SKU-1'`).Scan(&left)
	fmt.Println("stock", left)
	// Output:
	// applied <nil>
	// duplicate <nil>
	// stock 97
}
