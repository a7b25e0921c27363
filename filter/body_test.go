package filter

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// FuzzBody checks the lazy reading of a body against encoding/json's: every
// member and item, read out of order (so that reading stops and resumes
// mid-object), holds what the JSON says, the first of a repeated name
// counting.
func FuzzBody(f *testing.F) {
	for _, seed := range []string{
		`{"type": "invoice.paid", "data": {"object": {"id": "in_1", "lines": [1, 2.5, -3e2, true, null]}}}`,
		` [ {"a" : [ [] , {} ] } , "x\"y\\z\u00e9\/" , 12345678901234567890 ] `,
		`{"k": 1, "k": 2, "a\"b": {"}": "]", "{": "["}}`,
		`"text"`, `0`, `-0.5e-3`, `true`, `null`, `{}`, `[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || !utf8.Valid(body) || bytes.Contains(body, []byte(`\u`)) {
			// encoding/json and gjson may write an invalid character or a
			// lone surrogate differently: the lazy reading is not theirs.
			return
		}
		want, err := decode(json.NewDecoder(bytes.NewReader(body)))
		if err != nil {
			t.Fatalf("decode %q: %v", body, err)
		}
		for _, valid := range []bool{false, true} {
			compare(t, "body", parseBody(body, valid), want)
		}
	})
}

// decode reads one JSON value as compare expects it: numbers as
// json.Number, and of an object's repeated names the first.
func decode(dec *json.Decoder) (any, error) {
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		members := map[string]any{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decode(dec)
			if err != nil {
				return nil, err
			}
			if _, seen := members[name.(string)]; !seen {
				members[name.(string)] = v
			}
		}
		_, err := dec.Token()
		return members, err
	case json.Delim('['):
		items := []any{}
		for dec.More() {
			v, err := decode(dec)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		_, err := dec.Token()
		return items, err
	}
	return tok, nil
}

func compare(t *testing.T, path string, got ref.Val, want any) {
	t.Helper()
	switch want := want.(type) {
	case map[string]any:
		o, ok := got.(*object)
		if !ok {
			t.Fatalf("%s = %v (%T), want an object", path, got, got)
		}
		names := make([]string, 0, len(want))
		for name := range want {
			names = append(names, name)
		}
		for _, name := range names {
			v, found := o.Find(types.String(name))
			if !found {
				t.Fatalf("%s has no member %q", path, name)
			}
			compare(t, path+"."+name, v, want[name])
		}
		if _, found := o.Find(types.String("\x00absent")); found {
			t.Fatalf("%s finds a member it does not have", path)
		}
		if n := o.Size(); n != types.Int(len(want)) {
			t.Fatalf("%s has %v members, want %d", path, n, len(want))
		}
	case []any:
		a, ok := got.(*array)
		if !ok {
			t.Fatalf("%s = %v (%T), want an array", path, got, got)
		}
		for i := len(want) - 1; i >= 0; i-- {
			compare(t, path+"[i]", a.Get(types.Int(i)), want[i])
		}
		if v := a.Get(types.Int(len(want))); !types.IsError(v) {
			t.Fatalf("%s[%d] = %v past its end", path, len(want), v)
		}
		if n := a.Size(); n != types.Int(len(want)) {
			t.Fatalf("%s has %v items, want %d", path, n, len(want))
		}
	case json.Number:
		switch got := got.(type) {
		case types.Int:
			if n, err := want.Int64(); err != nil || types.Int(n) != got {
				t.Fatalf("%s = int %d, want %s", path, got, want)
			}
		case types.Double:
			if f, err := want.Float64(); err != nil || types.Double(f) != got {
				t.Fatalf("%s = double %v, want %s", path, got, want)
			}
		default: // out of a double's range
			if _, err := want.Float64(); err == nil || !types.IsError(got) {
				t.Fatalf("%s = %v (%T), want %s", path, got, got, want)
			}
		}
	case string:
		if got != types.String(want) {
			t.Fatalf("%s = %v, want %q", path, got, want)
		}
	case bool:
		if got != types.Bool(want) {
			t.Fatalf("%s = %v, want %v", path, got, want)
		}
	case nil:
		if got != types.NullValue {
			t.Fatalf("%s = %v, want null", path, got)
		}
	default:
		t.Fatalf("%s: unexpected %T", path, want)
	}
}
