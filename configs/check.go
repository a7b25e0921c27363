package configs

import (
	"cmp"
	"encoding"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checker walks a parsed document against the type it is decoded into, by
// the yaml tags of its fields, and names every field that is unknown, of
// the wrong shape or of the wrong type, by its YAML path and line. yaml
// itself stops at the first unknown field and names Go types; the walk
// also records each path's line, for the rule errors that Validate finds
// afterwards, and which paths an unset ${NAME} left empty.
type checker struct {
	unset    map[*yaml.Node][]string // scalars that unset ${NAME}s left empty
	lines    map[string]int          // YAML path → line of its key or item
	emptied  map[string][]string     // YAML path → the unset ${NAME}s that left it empty
	covered  map[string]bool         // paths a problem already explains
	problems []Problem
	// Each anchor is checked once per type: repeats and merges of merges
	// would otherwise take time exponential in the document's length.
	aliased   map[aliasUse]bool
	expanding map[*yaml.Node]bool // anchors being checked, to find one that holds itself
}

type aliasUse struct {
	anchor *yaml.Node
	t      reflect.Type
}

func newChecker(unset map[*yaml.Node][]string) *checker {
	return &checker{
		unset: unset, lines: map[string]int{}, emptied: map[string][]string{}, covered: map[string]bool{},
		aliased: map[aliasUse]bool{}, expanding: map[*yaml.Node]bool{},
	}
}

func (c *checker) fail(path string, n *yaml.Node, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
	c.covered[path] = true
}

// walk checks n, found at path, against t.
func (c *checker) walk(n *yaml.Node, t reflect.Type, path string) {
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, doc := range n.Content {
			c.walk(doc, t, path)
		}
		return
	case n.Kind == yaml.AliasNode:
		switch use := (aliasUse{n.Alias, t}); {
		case c.expanding[n.Alias]:
			c.fail(path, n, "*%s refers to the section that holds it", n.Value)
		case !c.aliased[use]:
			c.aliased[use], c.expanding[n.Alias] = true, true
			c.walk(n.Alias, t, path)
			delete(c.expanding, n.Alias)
		}
		return
	case n.ShortTag() == "!!null":
		return // yaml leaves the zero value, as if the field were absent
	case t.Kind() == reflect.Pointer:
		c.walk(n, t.Elem(), path)
		return
	}
	if n.Kind == yaml.ScalarNode {
		if names, ok := c.unset[n]; ok {
			c.emptied[path] = names
		}
	}
	switch {
	case reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType):
		// A type that reads itself (a byte size, say) says what is wrong.
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			c.fail(path, n, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.fail(path, n, "must be a section of fields, not %s", shape(n))
			return
		}
		c.fields(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(path, n, "must be a list, not %s", shape(n))
			return
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			c.lines[p] = item.Line
			c.walk(item, t.Elem(), p)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(path, n, "must be a map of name: value, not %s", shape(n))
			return
		}
		c.once(n, func(k *yaml.Node) string { return fmt.Sprintf("%s[%s]", path, k.Value) })
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := fmt.Sprintf("%s[%s]", path, k.Value)
			c.lines[p] = k.Line
			c.walk(k, t.Key(), p)
			c.walk(v, t.Elem(), p)
		}
	case n.Kind != yaml.ScalarNode:
		c.fail(path, n, "must be a single value, not %s", shape(n))
	default:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			c.fail(path, n, "%s", scalarProblem(n, t))
		}
	}
}

// fields checks a mapping against struct t: every key must be one of its
// fields, once.
func (c *checker) fields(n *yaml.Node, t reflect.Type, path string) {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if name := yamlName(f); f.IsExported() && name != "-" {
			fields[name] = f.Type
		}
	}
	c.once(n, func(k *yaml.Node) string { return join(path, k.Value) })
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" { // "<<: *defaults" merges a section in
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				c.walk(m, t, path)
			}
			continue
		}
		p := join(path, k.Value)
		c.lines[p] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			if near := nearest(k.Value, fields); near != "" {
				c.fail(p, k, "unknown field (did you mean %s?)", near)
				c.covered[strings.TrimSuffix(p, k.Value)+near] = true
			} else {
				c.fail(p, k, "unknown field (known: %s)", strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
			}
			continue
		}
		c.walk(v, ft, p)
	}
}

// once names every key of mapping n that is set again, at the path
// pathOf gives it, and drops the repeat: yaml decodes no field of a mapping
// with a repeated key, which would make each of them break a rule too.
func (c *checker) once(n *yaml.Node, pathOf func(key *yaml.Node) string) {
	seen := map[string]int{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if line, ok := seen[k.Value]; ok && k.ShortTag() != "!!merge" {
			c.fail(pathOf(k), k, "set twice (also on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		kept = append(kept, k, n.Content[i+1])
	}
	n.Content = kept
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// line returns the line of path, or of the nearest section holding it
// when the file does not set it.
func (c *checker) line(path string) int {
	for path != "" {
		if line, ok := c.lines[path]; ok {
			return line
		}
		path = path[:max(strings.LastIndexAny(path, ".["), 0)]
	}
	return 0
}

// explains reports whether a problem of the walk already explains one at
// path: one at path itself or at a section holding it.
func (c *checker) explains(path string) bool {
	for p := range c.covered {
		if under(path, p) {
			return true
		}
	}
	return false
}

// rules adds the problems Validate found, each with its line: a problem
// at a path an unset ${NAME} left empty, or that holds such paths, is
// named by the variable instead, and one the walk already explains is
// left out.
func (c *checker) rules(problems []Problem) {
	for _, p := range problems {
		if c.explains(p.Path) {
			continue
		}
		var emptied []string
		for path := range c.emptied {
			if under(path, p.Path) {
				emptied = append(emptied, path)
			}
		}
		if len(emptied) == 0 {
			p.Line = c.line(p.Path)
			c.problems = append(c.problems, p)
			continue
		}
		slices.Sort(emptied)
		for _, path := range emptied { // two rules may find the one empty field
			named := Problem{Path: path, Line: c.line(path), Msg: "empty — is " + strings.Join(c.emptied[path], " or ") + " set?"}
			if !slices.Contains(c.problems, named) {
				c.problems = append(c.problems, named)
			}
		}
	}
}

// sorted returns the problems in file order; those without a line last.
func (c *checker) sorted() []Problem {
	slices.SortStableFunc(c.problems, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line)
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return c.problems
}

// under reports whether path is section or lies within it.
func under(path, section string) bool {
	return path == section || section == "" ||
		strings.HasPrefix(path, section+".") || strings.HasPrefix(path, section+"[")
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name) // yaml's default key
	}
	return name
}

func shape(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section"
	case yaml.SequenceNode:
		return "a list"
	}
	// The value is not quoted: where a list or a section was expected, it
	// may be a secret expanded from the environment.
	return "a single value"
}

// scalarProblem says why the value n does not read as a t, in the words
// of a configuration file rather than of Go.
func scalarProblem(n *yaml.Node, t reflect.Type) string {
	switch {
	case t == durationType:
		return fmt.Sprintf("%q is not a duration (e.g. 90s, 15m or 168h)", n.Value)
	case t.Kind() == reflect.Bool:
		return fmt.Sprintf("%q is not true or false", n.Value)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0:
		return fmt.Sprintf("%q is text, not a number (quoted values and ${NAME} values are text)", n.Value)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return fmt.Sprintf("%q is not a whole number in range", n.Value)
	}
	return fmt.Sprintf("%q is not a valid value", n.Value)
}

// nearest returns the field name closest to key, if one is close enough
// to be a misspelling of it.
func nearest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", len(key)/3+2
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if d := distance(key, name); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)
