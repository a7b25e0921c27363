package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// One walk finds every field a source reads, as gjson reads paths
// literally: a segment is an object key, or an array index where the
// value is an array.
func TestFieldsWalk(t *testing.T) {
	var fs fields
	id := fs.add("request_id", "id")
	item := fs.add("item", "items.1.id")
	zero := fs.add("zero", "m.0")
	deep := fs.add("deep", "a.b.c")
	for _, tc := range []struct {
		body                 string
		id, item, zero, deep string // Raw, "" when absent
		dup                  string
	}{
		{`{"id":"x","items":[{"id":1},{"id":2}],"m":{"0":true},"a":{"b":{"c":null}}}`, `"x"`, "2", "true", "null", ""},
		{`{"items":[{"id":1}],"m":[7],"a":{"b":"c"}}`, "", "", "7", "", ""},
		{`[1,2]`, "", "", "", "", ""},
		{`{"id":1,"items":[{"id":1},{"id":2,"id":3}]}`, "", "", "", "", "items.1.id"},
		{`{"a":{"b":{}},"a":{"b":{"c":1}}}`, "", "", "", "", "a"},
		{`{"id":1,"x":{"id":2},"x":{"id":3}}`, "1", "", "", "", ""},
	} {
		values, dup := fs.walk([]byte(tc.body), nil)
		got := ""
		if dup != nil {
			got = dup.path
		}
		if got != tc.dup {
			t.Errorf("%s: duplicate %q, want %q", tc.body, got, tc.dup)
			continue
		}
		if dup != nil {
			continue
		}
		for _, f := range []struct {
			id   int
			want string
		}{{id, tc.id}, {item, tc.item}, {zero, tc.zero}, {deep, tc.deep}} {
			if raw := values[f.id].Raw; raw != f.want {
				t.Errorf("%s: field %d = %q, want %q", tc.body, f.id, raw, f.want)
			}
		}
	}
}

// A key on the path of a value webhookd reads must appear once: Go's,
// JavaScript's and Python's JSON readers take the last of two, gjson and
// sjson the first. A duplicate elsewhere is the downstream's business.
func TestDuplicateKeysOnAReadPathAreRefused(t *testing.T) {
	f := newFixture(t, nil)
	obj := `"data":{"object":{"id":"s","version":1}}`
	for _, tc := range []struct {
		name, body, field, key string
	}{
		{"request ID", `{"request_id":"dupA","request_id":"dupB",` + obj + `}`, "request_id", "request_id"},
		{"request ID, escaped", `{"request_id":"dupA","request\u005fid":"dupB",` + obj + `}`, "request_id", "request_id"},
		{"version", `{"request_id":"dupA","data":{"object":{"id":"s","version":5,"version":1}}}`, "version", "data.object.version"},
		{"resource", `{"request_id":"dupA","data":{"object":{"id":"s","id":"t","version":1}}}`, "resource", "data.object.id"},
		{"a parent of the resource", `{"request_id":"dupA",` + obj + `,"data":{"object":{"id":"t","version":2}}}`, "resource", "data"},
		{"an excluded field", `{"request_id":"dupA","sent_at":"now","sent_at":"later",` + obj + `}`, "sent_at", "sent_at"},
	} {
		r := f.post("billing", tc.body)
		if r.status != 400 || r.body["field"] != tc.field || !strings.Contains(fmt.Sprint(r.body["error"]), `"`+tc.key+`"`) {
			t.Errorf("%s: %d %v, want 400 blaming %s for key %q", tc.name, r.status, r.body, tc.field, tc.key)
		}
	}
	if f.hasReceipt("billing", "dupA") || f.hasReceipt("billing", "dupB") {
		t.Error("a body with a duplicate key wrote a receipt")
	}
	if r := f.admin("/admin/resources/billing/s"); r.status != 404 {
		t.Errorf("a body with a duplicate key moved a latest version: %d %v", r.status, r.body)
	}
	expect(t, f.post("billing", `{"request_id":"ok","note":1,"note":2,"data":{"object":{"id":"s","version":1},"x":1,"x":2}}`), 202, "accepted")
}
