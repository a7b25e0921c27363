package filter

import (
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/tidwall/gjson"
)

// The body is handed to CEL as values that read the JSON text as far as an
// expression looks, rather than decoded whole: a filter reads a field or
// two of a payload of kilobytes. An object reads its members in order up
// to the one asked for, an array its items up to the index asked for, and
// each keeps what it has read for the rest of the evaluation: however often
// an expression reads a field, in a comprehension say, the body is scanned
// at most once per evaluation, so the work an expression costs beyond what
// CEL counts (CostLimit) is bounded by the body's size.

// parseBody returns the body's root value, or an error value when the body
// is not JSON; valid says it is known to be.
func parseBody(body []byte, valid bool) ref.Val {
	// The JSON text is read in place for the evaluation, which holds no
	// value past it, and nothing writes to it.
	text := unsafe.String(unsafe.SliceData(body), len(body))
	if !valid && !gjson.Valid(text) {
		return types.NewErrFromString("the body is not JSON")
	}
	start := skipSpace(text, 0)
	if start == len(text) {
		return types.NewErrFromString("the body is not JSON")
	}
	if text[start] == '{' || text[start] == '[' {
		// Its members or items are read up to the closing bracket as
		// needed: finding that bracket now would scan the whole body.
		return value(text[start:])
	}
	return value(text[start:end(text, start)])
}

// value returns the CEL value of the JSON value raw.
func value(raw string) ref.Val {
	switch raw[0] {
	case '{':
		return &object{reader: reader{text: raw, next: 1}}
	case '[':
		return &array{reader: reader{text: raw, next: 1}}
	case '"':
		return types.String(unquote(raw))
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	}
	return number(raw)
}

// number reads a JSON number as an int when it is written as one and fits,
// else as a double.
func number(raw string) ref.Val {
	if !strings.ContainsAny(raw, ".eE") {
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return types.Int(n)
		}
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return types.NewErr("the number %s is out of range", raw)
	}
	return types.Double(f)
}

// unquote returns the text of the JSON string raw, quotes included.
func unquote(raw string) string {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}

// slot is a member of an object or an item of an array: its JSON text,
// and its value once asked for.
type slot struct {
	name string // of a member
	raw  string
	val  ref.Val
}

func (s *slot) value() ref.Val {
	if s.val == nil {
		s.val = value(s.raw)
	}
	return s.val
}

// reader reads the members of a JSON object, or the items of an array, one
// at a time.
type reader struct {
	text  string // from the opening bracket to the closing one
	next  int    // where the next member or item starts, after a ',' perhaps
	done  bool
	slots []slot
}

// read reads the next member or item, and reports whether there was one.
func (r *reader) read(members bool) bool {
	if r.done {
		return false
	}
	i := skipSpace(r.text, r.next)
	if r.text[i] == ',' {
		i = skipSpace(r.text, i+1)
	}
	if r.text[i] == '}' || r.text[i] == ']' {
		r.done = true
		return false
	}
	var s slot
	if members {
		nameEnd := endString(r.text, i)
		s.name = unquote(r.text[i:nameEnd])
		i = skipSpace(r.text, skipSpace(r.text, nameEnd)+1) // past the ':'
	}
	valueEnd := end(r.text, i)
	s.raw = r.text[i:valueEnd]
	r.next = valueEnd
	if r.slots == nil {
		r.slots = make([]slot, 0, 8) // rather than growing from 1
	}
	r.slots = append(r.slots, s)
	return true
}

// object is a JSON object.
type object struct {
	reader
	index map[string]int // the first slot of each name, once there are many
	all   traits.Mapper  // once listed
}

// indexAt is how many members an object reads before it indexes them by
// name rather than search them in order: below it, a search in order is
// cheaper than building the index.
const indexAt = 32

var _ traits.Mapper = (*object)(nil)

// Find returns the value of the first member named key.
func (o *object) Find(key ref.Val) (ref.Val, bool) {
	name, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	if j, ok := o.lookup(string(name)); ok {
		return o.slots[j].value(), true
	}
	for o.readMember() {
		if j := len(o.slots) - 1; o.slots[j].name == string(name) {
			return o.slots[j].value(), true
		}
	}
	return nil, false
}

// lookup searches the members read so far.
func (o *object) lookup(name string) (int, bool) {
	if o.index != nil {
		j, ok := o.index[name]
		return j, ok
	}
	for j := range o.slots {
		if o.slots[j].name == name {
			return j, true
		}
	}
	return 0, false
}

func (o *object) readMember() bool {
	if !o.read(true) {
		return false
	}
	switch n := len(o.slots); {
	case n == indexAt:
		o.index = make(map[string]int, 2*indexAt)
		for j := range o.slots {
			o.indexSlot(j)
		}
	case n > indexAt:
		o.indexSlot(n - 1)
	}
	return true
}

func (o *object) indexSlot(j int) {
	if _, seen := o.index[o.slots[j].name]; !seen {
		o.index[o.slots[j].name] = j
	}
}

func (o *object) Get(key ref.Val) ref.Val {
	if v, ok := o.Find(key); ok {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

func (o *object) Contains(key ref.Val) ref.Val {
	_, ok := o.Find(key)
	return types.Bool(ok)
}

// mapper returns the object as a CEL map, to list or compare it.
func (o *object) mapper() traits.Mapper {
	if o.all == nil {
		for o.readMember() {
		}
		members := make(map[ref.Val]ref.Val, len(o.slots))
		for j := range o.slots {
			name := types.String(o.slots[j].name)
			if _, seen := members[name]; !seen {
				members[name] = o.slots[j].value()
			}
		}
		o.all = types.NewRefValMap(types.DefaultTypeAdapter, members)
	}
	return o.all
}

func (o *object) Iterator() traits.Iterator                   { return o.mapper().Iterator() }
func (o *object) Size() ref.Val                               { return o.mapper().Size() }
func (o *object) Equal(other ref.Val) ref.Val                 { return o.mapper().Equal(other) }
func (o *object) ConvertToNative(t reflect.Type) (any, error) { return o.mapper().ConvertToNative(t) }
func (o *object) ConvertToType(t ref.Type) ref.Val            { return o.mapper().ConvertToType(t) }
func (o *object) Type() ref.Type                              { return types.MapType }
func (o *object) Value() any                                  { return o.text }

// array is a JSON array.
type array struct {
	reader
	all traits.Lister // once listed
}

var _ traits.Lister = (*array)(nil)

// Get returns the item at index, reading no further.
func (a *array) Get(index ref.Val) ref.Val {
	i, err := types.IndexOrError(index)
	if err != nil {
		return types.ValOrErr(index, "%v", err)
	}
	for i >= len(a.slots) && a.read(false) {
	}
	if i < 0 || i >= len(a.slots) {
		return types.NewErr("index '%d' out of range in list size '%d'", i, len(a.slots))
	}
	return a.slots[i].value()
}

// lister returns the array as a CEL list, to list or compare it.
func (a *array) lister() traits.Lister {
	if a.all == nil {
		for a.read(false) {
		}
		items := make([]ref.Val, len(a.slots))
		for i := range a.slots {
			items[i] = a.slots[i].value()
		}
		a.all = types.NewRefValList(types.DefaultTypeAdapter, items)
	}
	return a.all
}

func (a *array) Size() ref.Val                               { return a.lister().Size() }
func (a *array) Add(other ref.Val) ref.Val                   { return a.lister().Add(other) }
func (a *array) Contains(v ref.Val) ref.Val                  { return a.lister().Contains(v) }
func (a *array) Iterator() traits.Iterator                   { return a.lister().Iterator() }
func (a *array) Equal(other ref.Val) ref.Val                 { return a.lister().Equal(other) }
func (a *array) ConvertToNative(t reflect.Type) (any, error) { return a.lister().ConvertToNative(t) }
func (a *array) ConvertToType(t ref.Type) ref.Val            { return a.lister().ConvertToType(t) }
func (a *array) Type() ref.Type                              { return types.ListType }
func (a *array) Value() any                                  { return a.text }

// The scanning below expects valid JSON.

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// end returns where the JSON value that starts at s[i] ends.
func end(s string, i int) int {
	switch s[i] {
	case '"':
		return endString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = endString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] > ' ' {
		i++
	}
	return i
}

// endString returns where the JSON string that starts at s[i] ends.
func endString(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}
