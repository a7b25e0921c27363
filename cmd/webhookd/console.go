package main

import (
	"context"
	"time"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/console"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/postgres"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
)

// attempts tells each of its Metrics of every forward attempt: Prometheus
// and the console's overview.
type attempts []sender.Metrics

func (a attempts) Attempted(target forward.Target, result string, took time.Duration) {
	for _, m := range a {
		m.Attempted(target, result, took)
	}
}

func consoleSources(cfg *configs.Config) []console.Source {
	sources := make([]console.Source, len(cfg.Sources))
	for i, s := range cfg.Sources {
		sources[i] = console.Source{Name: s.Name}
		for _, r := range s.Routes {
			sources[i].Routes = append(sources[i].Routes, console.Route{Name: r.Name, Rate: r.Rate, Burst: r.Burst})
		}
	}
	return sources
}

// diskOf is what the console's overview shows of the backend's disk: the
// Badger store's data directory, or webhookd's tables in PostgreSQL.
func diskOf(b storage.Backend) console.Disk {
	switch s := b.(type) {
	case *store.Store:
		return storeDisk{s}
	case *postgres.Store:
		return tablesDisk{s}
	}
	return console.NoDisk{}
}

// storeDisk reports the disk the Badger store's files take (allocated
// blocks, not the apparent sizes of the files Badger maps) and the free
// space of its data directory as the store last read it.
type storeDisk struct{ store *store.Store }

func (d storeDisk) Usage(context.Context) (console.Usage, error) {
	size, err := d.store.Allocated()
	if err != nil {
		return console.Usage{}, err
	}
	sp := d.store.Space()
	return console.Usage{Size: size, Of: "in data_dir", Space: &console.Space{
		Free: sp.Free, Ballast: sp.Ballast, Reserve: sp.Reserve, Low: sp.Low}}, nil
}

// tablesDisk reports the disk webhookd's tables take in PostgreSQL; the
// database's free space is the database server's to watch.
type tablesDisk struct{ store *postgres.Store }

func (d tablesDisk) Usage(ctx context.Context) (console.Usage, error) {
	size, err := d.store.Size(ctx)
	if err != nil {
		return console.Usage{}, err
	}
	return console.Usage{Size: size, Of: "webhookd's tables and indexes"}, nil
}
