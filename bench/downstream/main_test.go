package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

func TestOrder(t *testing.T) {
	type delivery struct {
		route string
		body  string
	}
	body := func(id string, version string) string {
		return `{"request_id":"x","data":{"id":"` + id + `","version":` + version + `,"note":"n"}}`
	}
	tests := []struct {
		name       string
		deliveries []delivery
		outOfOrder int64
		repeats    int64
	}{
		{"growing versions", []delivery{{"a", body("r1", "1")}, {"a", body("r1", "2")}, {"a", body("r1", "7")}}, 0, 0},
		{"a repeat", []delivery{{"a", body("r1", "1")}, {"a", body("r1", "1")}, {"a", body("r1", "2")}}, 0, 1},
		{"a lower version", []delivery{{"a", body("r1", "5")}, {"a", body("r1", "4")}}, 1, 0},
		{"a lower version after a repeat", []delivery{{"a", body("r1", "5")}, {"a", body("r1", "5")}, {"a", body("r1", "3")}}, 1, 1},
		{"resources apart", []delivery{{"a", body("r1", "5")}, {"a", body("r2", "1")}}, 0, 0},
		{"routes apart", []delivery{{"a", body("r1", "5")}, {"b", body("r1", "1")}}, 0, 0},
		{"versions beyond 32 bits", []delivery{{"a", body("r1", "3000000000001")}, {"a", body("r1", "2000000000002")}}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOrder()
			for _, d := range tt.deliveries {
				o.receive(d.route, []byte(d.body))
			}
			out := fiber.Map{}
			o.count(out)
			if out["out_of_order"] != tt.outOfOrder || out["repeats"] != tt.repeats {
				t.Fatalf("out_of_order %v, repeats %v; want %d, %d", out["out_of_order"], out["repeats"], tt.outOfOrder, tt.repeats)
			}
		})
	}
}

func TestNoOrderCheckCountsNothing(t *testing.T) {
	out := fiber.Map{}
	var check orderCheck = noOrderCheck{}
	check.receive("a", []byte(`{"data":{"id":"r1","version":1}}`))
	check.count(out)
	if len(out) != 0 {
		t.Fatalf("count added %v", out)
	}
}

// BenchmarkOrderReceive is what -order adds to each request the downstream
// receives: two fields of a 1024-byte body like bench/webhook.lua's, and a
// map update under a mutex, on 2,000 resources.
func BenchmarkOrderReceive(b *testing.B) {
	bodies := make([][]byte, 2000)
	for i := range bodies {
		head := fmt.Sprintf(`{"request_id":"b-1-1-%d","sent_at":"2026-01-01T00:15:00Z","type":"subscription.updated","data":{"id":"q-1-%d","version":%d,"note":"`, i, i, 1000000000+i)
		bodies[i] = []byte(head + strings.Repeat("a", 1024-len(head)-3) + `"}}`)
	}
	o := newOrder()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		o.receive("down", bodies[i%len(bodies)])
	}
}
