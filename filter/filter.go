// Package filter selects the deliveries a route takes, with a CEL
// expression over the delivery (https://cel.dev).
//
// An expression reads these variables:
//
//	body        the JSON payload (dyn): body.type, body.data.object.id, body.items[0]
//	headers     map(string, string): the request's headers by lower-case name,
//	            several values of one header joined with ", "
//	request_id  string: the source's request ID
//	resource    string: the source's resource, "" when it has none
//	version     string: the source's version, "" when it has none
//
// A JSON number written without a fraction or an exponent that fits in 64
// bits reads as an int, any other as a double, so body.amount > 100 and
// body.amount / 100 > 5 read as written; CEL compares ints and doubles
// with each other, but does not mix them in arithmetic.
//
// An expression whose evaluation fails does not match: one that reads a
// field the body does not have, a body that is not JSON, a value of
// another type than the expression expects (body.type.startsWith on a
// number), or one that goes over CostLimit. has(body.data.object.customer)
// tests whether the last field is present, and is false when it is not;
// the fields before it must be there: has(body.data) &&
// has(body.data.object.customer) tests both, && skipping its right side
// when the left is false. headers["x-github-event"] reads one header, and
// "x-github-event" in headers tests it; names are matched whatever their
// case. headers can be read by name only, not listed: size(headers) and
// headers.exists(...) fail.
package filter

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// CostLimit bounds the work of one evaluation, in CEL's cost units: about
// one per variable or field read, comparison, operator or call, and one
// per ten bytes a string function scans. An evaluation that would go over
// it stops and does not match. A filter of a few conditions costs tens of
// units, a comprehension a few per item: body.items.exists(i, i.sku == "x")
// costs seven per item, so it runs over some 1,400 items. At the bound an evaluation takes a few milliseconds of CPU, the
// most a route's filter can add to a delivery whatever the expression; the
// body's JSON, read at most once per evaluation, adds its own size.
const CostLimit = 10_000

// Filter is a compiled expression. It is safe for concurrent use.
type Filter struct {
	prg cel.Program
}

// Input is one delivery as a filter reads it.
type Input struct {
	Body []byte // the payload; a filter reads it as JSON
	// ValidJSON says the caller has found Body to be valid JSON, so that
	// a filter does not check it again: the check reads the whole body,
	// and costs more than most filters.
	ValidJSON bool
	// Header returns the value of the header named name (lower case),
	// and whether the delivery has it.
	Header    func(name string) (string, bool)
	RequestID string
	Resource  string
	Version   string
}

// Error is an expression that does not compile.
type Error struct {
	// Line and Column are where in the expression the problem is, from
	// 1; 0 when it is the expression as a whole.
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("%s at %d:%d", e.Msg, e.Line, e.Column)
}

// Compile parses and type-checks expr, which must be a condition (of type
// bool, or dyn when it reads a value of the body). Its error is an *Error,
// the first problem found, with its position.
func Compile(expr string) (*Filter, error) {
	env, err := cel.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("request_id", cel.StringType),
		cel.Variable("resource", cel.StringType),
		cel.Variable("version", cel.StringType),
	)
	if err != nil {
		return nil, fmt.Errorf("filter environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		first := iss.Errors()[0]
		// An undeclared name is looked up in no container: saying so
		// does not help.
		msg := strings.Replace(first.Message, " (in container '')", "", 1)
		// An expression that ends too early is at column 0 of its end.
		return nil, &Error{Line: first.Location.Line(), Column: max(first.Location.Column()+1, 1), Msg: msg}
	}
	if t := ast.OutputType(); !t.IsAssignableType(cel.BoolType) {
		return nil, &Error{Msg: fmt.Sprintf("must be a condition (a bool), not a %s", t)}
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(CostLimit))
	if err != nil {
		// OptOptimize compiles constant regular expressions here.
		return nil, &Error{Msg: err.Error()}
	}
	return &Filter{prg: prg}, nil
}

// Match says whether in is selected: whether the expression evaluates to
// true. An evaluation that fails does not match, and err says why, for
// the caller to count or log: a filter that fails on every delivery reads
// a field the deliveries do not have. A nil Filter, a route without a
// filter, selects every delivery.
func (f *Filter) Match(in *Input) (bool, error) {
	if f == nil {
		return true, nil
	}
	out, _, err := f.prg.Eval(&activation{in: in})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluates to %s, not a bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// activation hands the interpreter the delivery's variables as it asks
// for them, so that what an expression does not read costs nothing.
type activation struct {
	in   *Input
	body ref.Val // parsed at the first read
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "body":
		if a.body == nil {
			a.body = parseBody(a.in.Body, a.in.ValidJSON)
		}
		return a.body, true
	case "headers":
		return headers{a.in.Header}, true
	case "request_id":
		return types.String(a.in.RequestID), true
	case "resource":
		return types.String(a.in.Resource), true
	case "version":
		return types.String(a.in.Version), true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

var errNotListed = errors.New("headers can be read by name, not listed")

// headersType has the traits of a map but those of listing it (iterable,
// sizer), which the function and macro bindings check before they list a
// value, so that listing headers is an error rather than a panic.
var headersType = types.NewObjectType("headers", traits.ContainerType)

// headers reads a delivery's headers one name at a time.
type headers struct {
	get func(name string) (string, bool)
}

func (h headers) find(key ref.Val) (string, bool) {
	name, ok := key.(types.String)
	if !ok || h.get == nil {
		return "", false
	}
	return h.get(strings.ToLower(string(name)))
}

// Get is headers[name].
func (h headers) Get(key ref.Val) ref.Val {
	if v, ok := h.find(key); ok {
		return types.String(v)
	}
	return types.NewErr("no such header: %v", key)
}

// IsSet is has(headers.name).
func (h headers) IsSet(key ref.Val) ref.Val {
	_, ok := h.find(key)
	return types.Bool(ok)
}

// Contains is name in headers.
func (h headers) Contains(key ref.Val) ref.Val {
	_, ok := h.find(key)
	return types.Bool(ok)
}

func (h headers) ConvertToNative(reflect.Type) (any, error) { return nil, errNotListed }

func (h headers) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return headersType
	}
	return types.NewErrFromString(errNotListed.Error())
}

func (h headers) Equal(ref.Val) ref.Val { return types.NewErrFromString(errNotListed.Error()) }
func (h headers) Type() ref.Type        { return headersType }
func (h headers) Value() any            { return h.get }
