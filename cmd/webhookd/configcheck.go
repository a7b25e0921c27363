package main

import (
	"cmp"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd/configs"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "config",
		Short:   "Inspect the configuration",
		Example: "  webhookd config check --config configs/webhookd.yaml",
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newConfigCheckCommand())
	return cmd
}

func newConfigCheckCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print it as serve would run it, secrets masked",
		Long: `Check loads the configuration exactly as serve does: defaults applied,
${NAME} expanded from the environment, every field validated. A valid
configuration is printed to stdout as YAML with its secrets masked; an invalid
one lists every problem on stderr, each with its line and YAML path, and
exits 1.`,
		Example: `  webhookd config check --config configs/webhookd.yaml
  STRIPE_WEBHOOK_SECRET=whsec_... webhookd config check --config stripe.yaml
  webhookd config check --config webhookd.yaml > /dev/null && echo valid`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, cmd.Flags().Changed("config"))
			if err != nil {
				return err
			}
			return writeConfig(cmd.OutOrStdout(), cfg.Masked())
		},
	}
	cmd.Flags().StringVar(&path, "config", configs.DefaultPath, "configuration file (YAML)")
	return cmd
}

// backendFields are the fields that only one storage backend reads, by
// backend; config check prints those of the chosen backend alone.
var backendFields = map[string][][2]string{
	configs.Badger:   {{"", "data_dir"}, {"storage", "min_free"}},
	configs.Postgres: {{"storage", "dsn"}, {"storage", "pool_size"}, {"storage", "statement_timeout"}},
}

// writeConfig prints cfg as YAML that configs.Parse reads back, without
// the fields of the storage backend it does not use, and says what a
// source without routes and a route without a filter do.
func writeConfig(w io.Writer, cfg *configs.Config) error {
	root := configNode(reflect.ValueOf(cfg))
	for backend, fields := range backendFields {
		if backend == cfg.Storage.Backend {
			continue
		}
		for _, f := range fields {
			parent := root
			if f[0] != "" {
				parent = value(root, f[0])
			}
			remove(parent, f[1])
		}
	}
	for _, src := range value(root, "sources").Content {
		routes := value(src, "routes")
		if len(routes.Content) == 0 {
			routes.LineComment = "decisions are recorded, nothing is forwarded"
		}
		for _, route := range routes.Content {
			if f := value(route, "filter"); f.Value == "" {
				f.LineComment = "every accepted delivery"
			}
		}
	}
	if cfg.Storage.Backend == configs.Badger && cfg.Storage.MinFree == 0 {
		// The reserve is derived from Badger's sizes, which depend on the
		// memory limit serve runs under, not on the file.
		value(value(root, "storage"), "min_free").LineComment = "derived when serve starts, which logs it (reserve_bytes)"
	}
	doc := &yaml.Node{
		Kind:        yaml.DocumentNode,
		HeadComment: "Effective webhookd configuration: defaults applied, ${NAME} expanded, secrets masked.",
		Content:     []*yaml.Node{root},
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("print configuration: %w", err)
	}
	return enc.Close()
}

var durationType = reflect.TypeFor[time.Duration]()

// configNode renders v as yaml.v3 would, except that durations read as
// "168h0m0s" rather than yaml.v3's nanosecond count, which is how they are
// written in a configuration file. Walking the value, not listing fields,
// keeps fields added to configs.Config later in the output.
func configNode(v reflect.Value) *yaml.Node {
	switch {
	case v.Type() == durationType:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: time.Duration(v.Int()).String()}
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		return configNode(v.Elem())
	case v.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" || (opts == "omitempty" && v.Field(i).IsZero()) {
				continue // an omitempty field is one that does not apply when empty
			}
			if name == "" {
				name = strings.ToLower(f.Name) // yaml.v3's default key
			}
			n.Content = append(n.Content, yamlString(name), configNode(v.Field(i)))
		}
		return n
	case v.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := range v.Len() {
			item := configNode(v.Index(i))
			if item.Kind != yaml.ScalarNode {
				n.Style = 0 // sources and other lists of mappings read better in block style
			}
			n.Content = append(n.Content, item)
		}
		return n
	case v.Kind() == reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			n.Content = append(n.Content, configNode(k), configNode(v.MapIndex(k)))
		}
		return n
	default:
		var n yaml.Node
		if err := n.Encode(v.Interface()); err != nil {
			// Config holds only strings, numbers and booleans here, which always encode.
			panic(fmt.Sprintf("encode %s: %v", v.Type(), err))
		}
		return &n
	}
}

// value returns the value of key in the mapping n.
func value(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	panic("configuration has no field " + key)
}

// remove drops key and its value from the mapping n.
func remove(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = slices.Delete(n.Content, i, i+2)
			return
		}
	}
	panic("configuration has no field " + key)
}

func yamlString(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}
