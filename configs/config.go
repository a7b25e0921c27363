package configs

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/versioning"
)

// DefaultPath is where serve looks for its configuration.
const DefaultPath = "configs/webhookd.yaml"

//go:embed webhookd.yaml
var example []byte

// Example returns the shipped example configuration, embedded in the binary.
func Example() []byte { return bytes.Clone(example) }

// Config is webhookd's configuration.
type Config struct {
	Listen          string        `yaml:"listen" validate:"required,listen"`
	DataDir         string        `yaml:"data_dir" validate:"required"`
	ReceiptTTL      time.Duration `yaml:"receipt_ttl" validate:"gte=1s"`
	MaxBody         int           `yaml:"max_body" validate:"gt=0,lte=33554432"` // Badger refuses values over 64 MiB
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" validate:"gt=0"`
	Log             Log           `yaml:"log"`
	Admin           Admin         `yaml:"admin"`
	// Record, when set, records every incoming request of every source
	// that does not set its own.
	Record  *Record  `yaml:"record"`
	Sources []Source `yaml:"sources" validate:"required,min=1,unique=Name,dive"`
}

// Record configures recording of incoming requests for replay testing.
type Record struct {
	Path string `yaml:"path" validate:"required"`
	// Redact names headers whose values are replaced in recordings, besides
	// Authorization, which always is.
	Redact []string `yaml:"redact" validate:"dive,header_name"`
}

// Verify configures signature verification of a source's deliveries.
type Verify struct {
	Scheme string `yaml:"scheme" validate:"required,oneof=none hmac-sha256 standard-webhooks stripe github shopify slack"`
	// Secrets: any may match, so a secret can be rotated by listing both.
	Secrets   []string      `yaml:"secrets"`
	Tolerance time.Duration `yaml:"tolerance" validate:"gte=0"`
	Header    string        `yaml:"header"`
	Encoding  string        `yaml:"encoding"`
	Prefix    string        `yaml:"prefix"`
}

// Signature returns the verification settings as package signature takes them.
func (v *Verify) Signature() signature.Config {
	return signature.Config{Scheme: v.Scheme, Secrets: v.Secrets, Tolerance: v.Tolerance, Header: v.Header, Encoding: v.Encoding, Prefix: v.Prefix}
}

// Log configures zap.
type Log struct {
	Level  string `yaml:"level" validate:"oneof=debug info warn error"`
	Format string `yaml:"format" validate:"oneof=json console"`
}

// Admin configures the admin API's listener. An empty token refuses every call.
type Admin struct {
	Listen string `yaml:"listen" validate:"required,listen"`
	Token  string `yaml:"token"`
}

// Source is one sender of webhooks, served at POST /hooks/{name}.
type Source struct {
	Name               string                    `yaml:"name" validate:"required,source_name"`
	RequestID          string                    `yaml:"request_id" validate:"required,selector"`
	DeliveryID         string                    `yaml:"delivery_id" validate:"omitempty,selector"`
	Resource           string                    `yaml:"resource" validate:"omitempty,selector"`
	Version            string                    `yaml:"version" validate:"omitempty,selector"`
	VersionFormat      versioning.Format         `yaml:"version_format" validate:"oneof=integer timestamp"`
	FingerprintExclude []string                  `yaml:"fingerprint_exclude" validate:"dive,json_path"`
	Responses          map[webhookd.Decision]int `yaml:"responses" validate:"dive,keys,oneof=accepted duplicate stale conflict,endkeys,gte=200,lte=599,with_body"`
	// Verify is nil when deliveries are not signed.
	Verify *Verify `yaml:"verify"`
	// Record overrides the global record setting for this source.
	Record *Record `yaml:"record"`
	// Forward is nil when the source only records decisions.
	Forward *Forward `yaml:"forward"`
}

// Forward configures delivery of a source's accepted webhooks downstream.
type Forward struct {
	URL         string            `yaml:"url" validate:"required,http_url"`
	Timeout     time.Duration     `yaml:"timeout" validate:"gt=0"`
	Concurrency int               `yaml:"concurrency" validate:"gte=1,lte=1024"`
	MaxAttempts int               `yaml:"max_attempts" validate:"gte=1"`
	Backoff     Backoff           `yaml:"backoff"`
	Supersede   bool              `yaml:"supersede"`
	Headers     map[string]string `yaml:"headers" validate:"dive,keys,header_name,endkeys"`
	PassHeaders []string          `yaml:"pass_headers" validate:"dive,header_name"`
	// Sign, when set, adds Standard Webhooks signature headers to every
	// forwarded request.
	Sign *Sign `yaml:"sign"`
}

// Sign configures signed forwarding.
type Sign struct {
	Secret string `yaml:"secret" validate:"required"`
}

// Backoff bounds the delay between forward attempts.
type Backoff struct {
	Initial time.Duration `yaml:"initial" validate:"gt=0"`
	Max     time.Duration `yaml:"max" validate:"gtefield=Initial"`
}

// New returns a configuration holding the defaults.
func New() *Config {
	return &Config{
		Listen:          ":8080",
		DataDir:         "./data",
		ReceiptTTL:      168 * time.Hour,
		MaxBody:         1 << 20,
		ShutdownTimeout: 10 * time.Second,
		Log:             Log{Level: "info", Format: "json"},
		Admin:           Admin{Listen: "127.0.0.1:8081"},
	}
}

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse applies data over the defaults, expands ${NAME} from the environment
// in every value, fills each source's defaults and validates the result.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	// Expanding parsed values, not raw text, keeps a secret holding YAML
	// syntax (quotes, colons, newlines) from changing the document.
	expandEnv(&doc)
	expanded, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	cfg := New()
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)                                              // a misspelt field must not silently fall back to its default
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) { // an empty file means all defaults
		return nil, fmt.Errorf("parse yaml: %w", withoutValues(err))
	}
	for i := range cfg.Sources {
		cfg.Sources[i].setDefaults()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func expandEnv(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			return os.Getenv(ref[2 : len(ref)-1])
		})
		// An expanded value is plain text, whatever it looks like.
		if n.Tag == "!!str" || n.Style != 0 {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		expandEnv(c)
	}
}

func (s *Source) setDefaults() {
	if s.VersionFormat == "" {
		s.VersionFormat = versioning.Integer
	}
	if s.Verify != nil {
		p := signature.PresetFor(s.Verify.Scheme)
		setDefault(&s.RequestID, p.RequestID)
		setDefault(&s.DeliveryID, p.DeliveryID)
	}
	if f := s.Forward; f != nil {
		setDefault(&f.Timeout, 10*time.Second)
		setDefault(&f.Concurrency, 8)
		setDefault(&f.MaxAttempts, 12)
		setDefault(&f.Backoff.Initial, time.Second)
		setDefault(&f.Backoff.Max, 10*time.Minute)
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Status returns the HTTP status the source answers for decision d.
func (s *Source) Status(d webhookd.Decision) int {
	if code, ok := s.Responses[d]; ok {
		return code
	}
	return DefaultStatus(d)
}

// DefaultStatus is the status of each decision unless a source overrides it.
// Stale answers 2xx because a provider retries every non-2xx for days, and a
// stale update can never succeed.
func DefaultStatus(d webhookd.Decision) int {
	switch d {
	case webhookd.Accepted:
		return 202
	case webhookd.Conflict:
		return 422
	default:
		return 200
	}
}

// Source returns the source called name.
func (c *Config) Source(name string) (*Source, bool) {
	for i := range c.Sources {
		if c.Sources[i].Name == name {
			return &c.Sources[i], true
		}
	}
	return nil, false
}

// Validate checks every field and returns all problems, each naming the
// field and the rule it breaks.
func (c *Config) Validate() error {
	var problems []string
	if err := validate.Struct(c); err != nil {
		var fieldErrs validator.ValidationErrors
		if !errors.As(err, &fieldErrs) {
			return fmt.Errorf("validate config: %w", err)
		}
		for _, fe := range fieldErrs {
			problems = append(problems, describe(fe))
		}
	}
	for i, s := range c.Sources {
		if s.Version != "" && s.Resource == "" {
			problems = append(problems, fmt.Sprintf("sources[%d].resource: is required when version is set (the stale rule orders versions of one resource)", i))
		}
		if s.Resource != "" && s.Version == "" && s.VersionFormat != versioning.Integer {
			problems = append(problems, fmt.Sprintf("sources[%d].version_format: set without version", i))
		}
		if s.Verify != nil && slices.Contains(signature.Schemes(), s.Verify.Scheme) {
			if _, err := signature.New(s.Verify.Signature()); err != nil {
				problems = append(problems, fmt.Sprintf("sources[%d].verify.%v", i, err))
			}
		}
		if s.Verify != nil {
			// A copy sent again after its receipt expired, and still within
			// tolerance, would be accepted and forwarded as new.
			if w := s.Verify.Signature().ReplayWindow(); w >= c.ReceiptTTL {
				problems = append(problems, fmt.Sprintf("sources[%d].verify.tolerance: a signed delivery passes for %s (the tolerance either side of its timestamp), not less than receipt_ttl %s: a copy sent after its receipt expired would be accepted again", i, w, c.ReceiptTTL))
			}
		}
		if s.Name == UnknownSource {
			problems = append(problems, fmt.Sprintf("sources[%d].name: %q is reserved: it is the metrics label of requests to no configured source", i, s.Name))
		}
		if f := s.Forward; f != nil && f.MaxAttempts > 0 {
			// An entry still retrying when its payload expires is
			// dead-lettered without a body.
			longest := addSat(mulSat(f.MaxAttempts-1, f.Backoff.Max), mulSat(f.MaxAttempts, f.Timeout))
			if longest >= c.ReceiptTTL {
				problems = append(problems, fmt.Sprintf("sources[%d].forward.max_attempts: retries may take up to %s (attempts × timeout and backoff.max), not less than receipt_ttl %s, which is how long the payload is kept", i, longest, c.ReceiptTTL))
			}
		}
		if s.Forward != nil && s.Forward.Sign != nil {
			if _, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{s.Forward.Sign.Secret}}); err != nil {
				problems = append(problems, fmt.Sprintf("sources[%d].forward.sign.secret: %v", i, strings.TrimPrefix(err.Error(), "secrets[0]: ")))
			}
		}
	}
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// quotedValue is how yaml quotes a value in a type error: the start of it.
// Where a list or a map was expected, that may be a secret expanded from
// the environment (secrets, forward.headers); a number is named.
var (
	quotedValue   = regexp.MustCompile("`[^`]*`")
	intoContainer = regexp.MustCompile(` into (\[\]|map\[|\*?configs\.)`)
)

// withoutValues drops the values that yaml's type errors quote where a
// list, a map or a section was expected: the message still names the line
// and the types, and goes to logs and CI output where a secret must not.
func withoutValues(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		lines[i] = e
		if intoContainer.MatchString(e) {
			lines[i] = quotedValue.ReplaceAllString(e, "a value")
		}
	}
	return errors.New("yaml: unmarshal errors:\n  " + strings.Join(lines, "\n  "))
}

// ValidationError lists every problem found in a configuration.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// UnknownSource is the metrics label of requests to no configured source,
// so no source may take the name.
const UnknownSource = "unknown"

// mulSat and addSat saturate instead of wrapping around, so that a huge
// max_attempts cannot pass the retry window check by overflowing it.
func mulSat(n int, d time.Duration) time.Duration {
	if n > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

var validate = newValidator()

var (
	selectorRe   = regexp.MustCompile(`^(json:[^.\s]+(\.[^.\s]+)*|header:[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+)$`)
	jsonPathRe   = regexp.MustCompile(`^[^.\s]+(\.[^.\s]+)*$`)
	sourceNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	headerNameRe = regexp.MustCompile(`^[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+$`)
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		return name
	})
	matches := func(re *regexp.Regexp) validator.Func {
		return func(fl validator.FieldLevel) bool { return re.MatchString(fl.Field().String()) }
	}
	must(v.RegisterValidation("selector", matches(selectorRe)))
	must(v.RegisterValidation("json_path", matches(jsonPathRe)))
	must(v.RegisterValidation("source_name", matches(sourceNameRe)))
	must(v.RegisterValidation("header_name", matches(headerNameRe)))
	must(v.RegisterValidation("with_body", func(fl validator.FieldLevel) bool {
		switch fl.Field().Int() {
		case http.StatusNoContent, http.StatusResetContent, http.StatusNotModified:
			return false
		}
		return true
	}))
	must(v.RegisterValidation("listen", func(fl validator.FieldLevel) bool {
		_, port, err := net.SplitHostPort(fl.Field().String())
		if err != nil {
			return false
		}
		n, err := strconv.ParseUint(port, 10, 16)
		return err == nil && (n > 0 || port == "0")
	}))
	return v
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// rules say, per validation tag, what a value must be.
var rules = map[string]string{
	"required":    "is required",
	"selector":    "must be json:<dotted.path> or header:<Name>",
	"json_path":   "must be a dotted JSON path, e.g. data.object.id",
	"source_name": "must be 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit (it is a URL path segment)",
	"header_name": "must be an HTTP header name",
	"listen":      "must be host:port, e.g. :8080 or 127.0.0.1:8081",
	"unique":      "must not repeat a name",
	"gtefield":    "must not be less than backoff.initial",
	"http_url":    "must be an http or https URL",
	"with_body":   "must be a status that carries a body (every answer is JSON); 204, 205 and 304 carry none",
}

func describe(fe validator.FieldError) string {
	field := fe.Namespace()
	if _, rest, ok := strings.Cut(field, "."); ok {
		field = rest // drop the root type's name
	}
	rule, ok := rules[fe.Tag()]
	switch {
	case ok:
	case fe.Tag() == "oneof":
		rule = "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case fe.Tag() == "min" && (fe.Kind() == reflect.Slice):
		rule = "needs at least " + fe.Param() + " entry"
	case fe.Tag() == "gt" || fe.Tag() == "gte" || fe.Tag() == "lt" || fe.Tag() == "lte" || fe.Tag() == "min" || fe.Tag() == "max":
		rule = fmt.Sprintf("must be %s %s", comparisons[fe.Tag()], fe.Param())
	default:
		rule = "fails rule " + fe.Tag()
	}
	if got := fmt.Sprint(fe.Value()); got != "" && got != "0" && got != "[]" {
		return fmt.Sprintf("%s: %s (got %s)", field, rule, got)
	}
	return fmt.Sprintf("%s: %s", field, rule)
}

var comparisons = map[string]string{"gt": "greater than", "gte": "at least", "min": "at least", "lt": "less than", "lte": "at most", "max": "at most"}
