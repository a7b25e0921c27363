package gateway

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2/utils"
	"github.com/tidwall/gjson"
)

// jsonPath turns a dotted path into a gjson (and sjson) path that reads
// every segment literally: a key may hold characters gjson treats as
// syntax. gjson.Escape leaves a leading ':' alone, which sjson takes as
// "this is an object key" and drops, so its deletes missed the key.
func jsonPath(dotted string) string {
	segs := strings.Split(dotted, ".")
	for i, s := range segs {
		segs[i] = gjson.Escape(s)
		if strings.HasPrefix(s, ":") {
			segs[i] = `\` + segs[i]
		}
	}
	return strings.Join(segs, ".")
}

// fields is every JSON field a source reads, as a tree of their keys, so
// that one walk of a body finds all their values, and every key on their
// paths that an object holds twice. Such a key is refused rather than read
// first-wins, as gjson and sjson read it: the downstream's JSON reader
// (Go's, JavaScript's, Python's) takes the last, and webhookd would
// deduplicate, order and fingerprint on other values than the ones it acts on.
type fields struct {
	nodes []*fieldNode // nodes[0] is the root, the body itself
}

// fieldNode is one key on the path of one or more fields. A segment is an
// object key, or an array index where the value is an array.
type fieldNode struct {
	id       int
	key      string
	index    int    // key as an array index, or -1
	path     string // dotted, from the root
	owner    string // the first field whose path goes through this key, to blame
	children []*fieldNode
	maxIndex int // the highest index among children: where an array's walk ends
}

// add registers the field at dotted, named owner in messages, and returns
// its node's id, which indexes walk's values.
func (fs *fields) add(owner, dotted string) int {
	if fs.nodes == nil {
		fs.nodes = []*fieldNode{{index: -1, maxIndex: -1}}
	}
	n := fs.nodes[0]
	for seg := range strings.SplitSeq(dotted, ".") {
		var next *fieldNode
		for _, c := range n.children {
			if c.key == seg {
				next = c
			}
		}
		if next == nil {
			index, err := strconv.Atoi(seg)
			if err != nil || index < 0 || seg != strconv.Itoa(index) {
				index = -1
			}
			next = &fieldNode{id: len(fs.nodes), key: seg, index: index, path: strings.TrimPrefix(n.path+"."+seg, "."), owner: owner, maxIndex: -1}
			fs.nodes = append(fs.nodes, next)
			n.children = append(n.children, next)
			n.maxIndex = max(n.maxIndex, index)
		}
		n = next
	}
	return n.id
}

// maxStackFields is how many keys a walk's values fit in without a heap
// allocation, in an array of the caller's; a source reads a handful.
const maxStackFields = 16

// walk finds every field's value in body, which must be valid JSON, and
// returns them in values (grown if it is too short), indexed by the ids
// add returned; a value that is absent does not Exist. The values point
// into body: copy what outlives it. walk stops at the first key it finds
// twice on a field's path, and returns it as dup.
func (fs *fields) walk(body []byte, values []gjson.Result) (_ []gjson.Result, dup *fieldNode) {
	if len(fs.nodes) == 0 {
		return values[:0], nil
	}
	if cap(values) < len(fs.nodes) {
		values = make([]gjson.Result, len(fs.nodes))
	}
	values = values[:len(fs.nodes)]
	clear(values)
	return values, fs.nodes[0].walk(gjson.Parse(utils.UnsafeString(body)), values)
}

func (n *fieldNode) walk(v gjson.Result, values []gjson.Result) (dup *fieldNode) {
	values[n.id] = v
	if len(n.children) == 0 {
		return nil
	}
	switch {
	case v.IsObject():
		v.ForEach(func(key, val gjson.Result) bool {
			for _, c := range n.children {
				if c.key == key.Str {
					if values[c.id].Exists() {
						dup = c
						return false
					}
					values[c.id] = val
				}
			}
			return true
		})
	case v.IsArray():
		i := 0
		v.ForEach(func(_, val gjson.Result) bool {
			for _, c := range n.children {
				if c.index == i {
					values[c.id] = val
				}
			}
			i++
			return i <= n.maxIndex
		})
	}
	if dup != nil {
		return dup
	}
	for _, c := range n.children {
		if values[c.id].Exists() {
			if dup = c.walk(values[c.id], values); dup != nil {
				return dup
			}
		}
	}
	return nil
}
