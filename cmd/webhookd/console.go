package main

import (
	"time"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/console"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/store"
)

// attempts tells each of its Metrics of every forward attempt: Prometheus
// and the console's overview.
type attempts []sender.Metrics

func (a attempts) Attempted(source, result string, took time.Duration) {
	for _, m := range a {
		m.Attempted(source, result, took)
	}
}

func consoleSources(cfg *configs.Config) []console.Source {
	sources := make([]console.Source, len(cfg.Sources))
	for i, s := range cfg.Sources {
		sources[i] = console.Source{Name: s.Name, Forwards: s.Forward != nil}
	}
	return sources
}

// storeDisk reports the Badger store's size and the free space of its
// data directory, as the store last read it, for the console's overview.
type storeDisk struct{ store *store.Store }

func (d storeDisk) Usage() (console.Usage, error) {
	lsm, vlog := d.store.Sizes()
	sp := d.store.Space()
	return console.Usage{Size: lsm + vlog, Free: sp.Free, Reserve: sp.Reserve, Low: sp.Low}, nil
}
