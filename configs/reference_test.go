package configs

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestEveryFieldIsDocumented fails when a configuration field is missing
// from docs/configuration.md, the reference that promises every field:
// each field's dotted path from its section, as the reference's tables
// name it (log.level, backoff.initial, sign.secret), is quoted there.
func TestEveryFieldIsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeFor[Config]().PkgPath() {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			elem := f.Type
			for elem.Kind() == reflect.Pointer || elem.Kind() == reflect.Slice {
				elem = elem.Elem()
			}
			// Sections with a table of their own are named alone, and their
			// fields without them; other sections' fields carry the
			// section's name (log.level, backoff.initial).
			ownTable := name == "sources" || name == "verify" || name == "routes" || name == "record"
			if (ownTable || elem.Kind() != reflect.Struct || elem.PkgPath() != typ.PkgPath()) && !strings.Contains(doc, "`"+path+name+"`") {
				t.Errorf("docs/configuration.md does not document `%s`", path+name)
			}
			if ownTable {
				walk(f.Type, "")
			} else {
				walk(f.Type, path+name+".")
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
}
