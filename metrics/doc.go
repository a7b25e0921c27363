// Package metrics exposes webhookd's Prometheus metrics. It implements the
// small Metrics interfaces that gateway and forward define for themselves,
// and reads the store's and the forwarder's gauges at scrape time.
//
// Every label takes a bounded set of values: sources come from the
// configuration (requests for unknown sources count as source="unknown"),
// and so do routes (a route removed from it keeps a series only while the
// store holds its entries); decisions, reasons and results are fixed lists.
package metrics
