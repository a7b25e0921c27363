// Command inventory is a small service that holds stock per SKU and
// applies the shop's ReservationAccepted events, forwarded by webhookd,
// through package consume: each event lowers its SKU's stock exactly once,
// however often webhookd delivers it. README.md runs it behind webhookd.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/webhookd/webhookd/consume"
	"github.com/webhookd/webhookd/versioning"
)

// demoSecret is the signing secret of webhookd.yaml in this directory, so
// that the demo runs in two commands; anything real sets
// INVENTORY_SIGNING_SECRET (and the route's sign.secret) to its own.
const demoSecret = "whsec_ZGVtbyBvbmx5OiByZXBsYWNlIHRoaXMgc2VjcmV0"

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	dsn := flag.String("db", "sqlite:inventory.db", `database: "sqlite:<file>" or "postgres://..."`)
	prefix := flag.String("prefix", "inventory", "prefix of the service's table names")
	stock := flag.String("stock", "SKU-1=100,SKU-2=100,SKU-3=100", "SKUs and their initial stock, set where a SKU is not yet held")
	flag.Parse()
	secret := os.Getenv("INVENTORY_SIGNING_SECRET")
	if secret == "" {
		secret = demoSecret
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, *dsn, *prefix, *stock, secret, log); err != nil {
		log.Error("inventory stopped", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(listen, dsn, prefix, stock, secret string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := open(ctx, dsn, prefix, secret, log)
	if err != nil {
		return err
	}
	defer s.db.Close()
	if err := s.seed(ctx, stock); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", s.consumer.Handler(s.apply))
	mux.HandleFunc("GET /stock", s.stock)
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Info("inventory listening", slog.String("addr", listen))
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// service is the inventory: its database and the consumer that applies
// events to it.
type service struct {
	db       *sql.DB
	dialect  consume.Dialect
	consumer *consume.Consumer
	stockT   string // SKU → quantity
	reserveT string // one row per applied reservation
}

func open(ctx context.Context, dsn, prefix, secret string, log *slog.Logger) (*service, error) {
	s := &service{stockT: prefix + "_stock", reserveT: prefix + "_reservations"}
	var err error
	if file, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		s.dialect = consume.SQLite
		// Writers queue for SQLite's one write lock instead of failing.
		s.db, err = sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	} else {
		s.dialect = consume.PostgreSQL
		s.db, err = sql.Open("pgx", dsn)
	}
	if err != nil {
		return nil, err
	}
	s.consumer, err = consume.New(consume.Config{
		DB:       s.db,
		Dialect:  s.dialect,
		Table:    prefix + "_processed",
		Versions: versioning.Integer, // webhookd.yaml's version_format
		Secrets:  []string{secret},
		Log:      log,
	})
	if err != nil {
		return nil, err
	}
	if err := s.consumer.CreateSchema(ctx); err != nil {
		return nil, err
	}
	// No unique constraint on reservation_id: applying once is package
	// consume's work, and a failure of it shows here as a second row.
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ` + s.stockT + ` (sku TEXT PRIMARY KEY, quantity INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + s.reserveT + ` (reservation_id TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL, event_key TEXT NOT NULL)`,
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
	}
	return s, nil
}

// seed sets the initial stock of the SKUs not yet held, so a restart
// keeps what has been reserved.
func (s *service) seed(ctx context.Context, stock string) error {
	for item := range strings.SplitSeq(stock, ",") {
		sku, qty, ok := strings.Cut(strings.TrimSpace(item), "=")
		n, err := strconv.Atoi(qty)
		if !ok || err != nil || n < 0 {
			return fmt.Errorf("stock %q: want SKU=quantity", item)
		}
		if _, err := s.db.ExecContext(ctx, s.dialect.Rebind(`INSERT INTO `+s.stockT+` (sku, quantity) VALUES (?, ?) ON CONFLICT DO NOTHING`), sku, n); err != nil {
			return fmt.Errorf("seed stock: %w", err)
		}
	}
	return nil
}

// ReservationAccepted is the shop's event: quantity units of sku are held
// for a reservation.
type ReservationAccepted struct {
	Type          string `json:"type"`
	ID            string `json:"id"`
	ReservationID string `json:"reservation_id"`
	SKU           string `json:"sku"`
	Quantity      int    `json:"quantity"`
}

// apply lowers the SKU's stock and records the reservation, in the
// transaction that records the event's key. What no retry can cure
// (a malformed event, an unknown SKU, too little stock) is permanent, so
// webhookd dead-letters it for someone to look at.
func (s *service) apply(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
	var ev ReservationAccepted
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return consume.Permanent(fmt.Errorf("event: %w", err))
	}
	if ev.Type != "ReservationAccepted" {
		return nil // other events of the shop are not the inventory's
	}
	if ev.Quantity <= 0 || ev.SKU == "" || ev.ReservationID == "" {
		return consume.Permanent(fmt.Errorf("reservation %q: needs a reservation_id, a sku and a positive quantity", ev.ReservationID))
	}
	res, err := tx.ExecContext(ctx, s.dialect.Rebind(`UPDATE `+s.stockT+` SET quantity = quantity - ? WHERE sku = ? AND quantity >= ?`), ev.Quantity, ev.SKU, ev.Quantity)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return consume.Permanent(fmt.Errorf("reservation %s: SKU %q unknown or with less than %d in stock", ev.ReservationID, ev.SKU, ev.Quantity))
	}
	_, err = tx.ExecContext(ctx, s.dialect.Rebind(`INSERT INTO `+s.reserveT+` (reservation_id, sku, quantity, event_key) VALUES (?, ?, ?, ?)`), ev.ReservationID, ev.SKU, ev.Quantity, d.Key)
	return err
}

// stock answers the stock of every SKU, as JSON.
func (s *service) stock(w http.ResponseWriter, r *http.Request) {
	rows, err := s.db.QueryContext(r.Context(), `SELECT sku, quantity FROM `+s.stockT+` ORDER BY sku`)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer rows.Close()
	stock := map[string]int{}
	for rows.Next() {
		var sku string
		var n int
		if err := rows.Scan(&sku, &n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		stock[sku] = n
	}
	if err := rows.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(stock)
}
