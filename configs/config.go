package configs

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
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
	"github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/tracing"
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
	TLS             *TLS          `yaml:"tls"`      // serves listen over TLS when set
	DataDir         string        `yaml:"data_dir"` // the badger backend's directory; ./data unless set
	Storage         Storage       `yaml:"storage"`
	ReceiptTTL      time.Duration `yaml:"receipt_ttl" validate:"gte=1s"`
	MaxBody         int           `yaml:"max_body" validate:"gt=0"` // of sources without a provider preset; the storage backend checks every source's
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" validate:"gt=0"`
	Log             Log           `yaml:"log"`
	Admin           Admin         `yaml:"admin"`
	// Record, when set, records every incoming request of every source
	// that does not set its own.
	Record  *Record  `yaml:"record"`
	Sources []Source `yaml:"sources" validate:"required,min=1,unique=Name,dive"`
	// Tracing exports OpenTelemetry traces; off unless it or the OTEL_*
	// environment names an endpoint.
	Tracing tracing.Config `yaml:"tracing"`
}

// Storage chooses where receipts, versions and the outbox are kept: in
// Badger under data_dir, for one process, or in PostgreSQL, for any number
// of replicas sharing one database.
type Storage struct {
	Backend string `yaml:"backend" validate:"oneof=badger postgres"`
	// MinFree is the free space, in bytes, kept in data_dir for what Badger
	// may still write: below it new decisions are refused with 503 until
	// there is more, and webhookd does not start. 0 derives it from
	// Badger's sizes (store.Reserve).
	MinFree int64 `yaml:"min_free" validate:"gte=0"`
	// DSN is the postgres backend's connection string, as a URL
	// (postgres://user:password@host:5432/db) or key=value pairs.
	DSN string `yaml:"dsn"`
	// PoolSize is how many connections the postgres backend opens at most.
	PoolSize int `yaml:"pool_size" validate:"gte=0,lte=1000"`
	// StatementTimeout bounds every statement of the postgres backend.
	StatementTimeout time.Duration `yaml:"statement_timeout" validate:"gte=0"`
}

// Storage backends.
const (
	Badger   = "badger"
	Postgres = "postgres"
)

// setStorageDefaults fills the chosen backend's defaults: data_dir for
// Badger, unless the file sets it (to an empty value, when a ${NAME} is
// unset: that is an error, not ./data), the pool and the statement timeout
// for PostgreSQL.
func (c *Config) setStorageDefaults(dataDirSet bool) {
	switch c.Storage.Backend {
	case Badger:
		if !dataDirSet {
			c.DataDir = "./data"
		}
	case Postgres:
		setDefault(&c.Storage.PoolSize, 8)
		setDefault(&c.Storage.StatementTimeout, 5*time.Second)
	}
}

// storageProblems are the fields that do not belong with the chosen
// backend, or that it needs and lacks.
func (c *Config) storageProblems() []Problem {
	var problems []Problem
	switch c.Storage.Backend {
	case Badger:
		if c.DataDir == "" {
			problems = append(problems, Problem{Path: "data_dir", Msg: "is required with storage.backend badger"})
		}
		if c.Storage.DSN != "" {
			problems = append(problems, Problem{Path: "storage.dsn", Msg: "is set, but storage.backend is badger, which keeps everything under data_dir: set storage.backend: postgres to use the database"})
		}
	case Postgres:
		if c.DataDir != "" {
			problems = append(problems, Problem{Path: "data_dir", Msg: "is set, but storage.backend postgres keeps everything in the database: remove data_dir, or set storage.backend: badger"})
		}
		if c.Storage.MinFree != 0 {
			problems = append(problems, Problem{Path: "storage.min_free", Msg: "is the reserve kept in Badger's data_dir; with storage.backend postgres the database's disk is the database's to watch: remove it"})
		}
		if c.Storage.DSN == "" {
			problems = append(problems, Problem{Path: "storage.dsn", Msg: "is required with storage.backend postgres"})
		}
	}
	return problems
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
	Secrets []string `yaml:"secrets"`
	// Tolerance applies to schemes that sign a timestamp; it stays zero,
	// and is not printed, for the others.
	Tolerance time.Duration `yaml:"tolerance,omitempty" validate:"gte=0"`
	// Header, Encoding and Prefix apply to hmac-sha256 only.
	Header   string `yaml:"header,omitempty"`
	Encoding string `yaml:"encoding,omitempty"`
	Prefix   string `yaml:"prefix,omitempty"`
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

// NoAdminToken says what an empty admin token does and how to set one, for
// the admin API's and the console's refusals.
const NoAdminToken = "no admin token is configured; set admin.token (the example configuration reads it from WEBHOOKD_ADMIN_TOKEN) and restart webhookd"

// Admin configures the admin API's listener. An empty token refuses every call.
type Admin struct {
	Listen string `yaml:"listen" validate:"required,listen"`
	Token  string `yaml:"token"`
	// TLS, when set, serves the admin listener over TLS.
	TLS *TLS `yaml:"tls"`
}

// Source is one sender of webhooks, served at POST /hooks/{name}.
type Source struct {
	Name       string `yaml:"name" validate:"required,source_name"`
	RequestID  string `yaml:"request_id" validate:"required,selector"`
	DeliveryID string `yaml:"delivery_id" validate:"omitempty,selector"`
	Resource   string `yaml:"resource" validate:"omitempty,selector"`
	Version    string `yaml:"version" validate:"omitempty,selector"`
	// VersionFormat is empty, and not printed, when there is no version.
	VersionFormat versioning.Format `yaml:"version_format,omitempty" validate:"omitempty,oneof=integer timestamp"`
	// VersionTies says what the stale rule does with a version equal to
	// the latest accepted one; empty, and not printed, when there is no
	// version.
	VersionTies versioning.Ties `yaml:"version_ties,omitempty" validate:"omitempty,oneof=stale accept"`
	// MaxBody is the largest body the source takes, in bytes: its verify
	// scheme's provider preset (signature.MaxBodyFor), else the global
	// max_body.
	MaxBody            int                       `yaml:"max_body" validate:"gte=0"`
	FingerprintExclude []string                  `yaml:"fingerprint_exclude" validate:"dive,json_path"`
	Responses          map[webhookd.Decision]int `yaml:"responses" validate:"dive,keys,oneof=accepted duplicate stale conflict,endkeys,gte=200,lte=599,with_body"`
	// Verify is nil when deliveries are not signed.
	Verify *Verify `yaml:"verify"`
	// Record overrides the global record setting for this source.
	Record *Record `yaml:"record"`
	// Routes are where the source's accepted deliveries go, each to the
	// routes whose filter selects it; none when the source only records
	// decisions.
	Routes []Route `yaml:"routes" validate:"dive"`
}

// DefaultRoute names the route of a source that has one and does not name
// it.
const DefaultRoute = "default"

// Route configures delivery of a source's accepted webhooks to one
// downstream.
type Route struct {
	// Name is unique in its source; it may be left out, as DefaultRoute,
	// when the source has one route. It is required with more than one,
	// which Validate says in those words.
	Name string `yaml:"name" validate:"omitempty,source_name"`
	// Filter is a CEL expression over the delivery (package filter); empty
	// selects every accepted delivery.
	Filter string `yaml:"filter"`
	// Match is Filter compiled by Parse, nil when Filter is empty (a nil
	// Filter selects every delivery).
	Match       *filter.Filter    `yaml:"-"`
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
	// Rate bounds the requests started to the route, "N/s" or "N/m"
	// (empty: no bound), with Burst of them at once.
	Rate  string `yaml:"rate"`
	Burst int    `yaml:"burst" validate:"gte=0"`
	// Breaker stops sending to a route that keeps failing.
	Breaker Breaker `yaml:"breaker"`
	// TLS configures https to the downstream beyond the system's defaults.
	TLS *RouteTLS `yaml:"tls"`
}

// Breaker configures a route's circuit breaker (forward.Breaker).
type Breaker struct {
	Failures    int           `yaml:"failures"`
	Cooldown    time.Duration `yaml:"cooldown"`
	MaxCooldown time.Duration `yaml:"max_cooldown"`
	// Off turns the breaker off: every failure counts against its entry,
	// and the route is sent to however often it fails.
	Off bool `yaml:"off"`
}

// Breaker defaults: a typical internal service that fails five requests
// in a row is down, not unlucky; ten seconds is short next to an outage
// and long next to a restart's blip, and five minutes bounds the wait
// after the downstream comes back.
const (
	defaultBreakerFailures    = 5
	defaultBreakerCooldown    = 10 * time.Second
	defaultBreakerMaxCooldown = 5 * time.Minute
)

// ForwardBreaker returns the route's breaker as the forwarder takes it;
// its zero value, when the breaker is off, never opens.
func (r *Route) ForwardBreaker() forward.Breaker {
	if r.Breaker.Off {
		return forward.Breaker{}
	}
	return forward.Breaker{Failures: r.Breaker.Failures, Cooldown: r.Breaker.Cooldown, MaxCooldown: r.Breaker.MaxCooldown}
}

// ForwardRate returns the route's rate limit as the forwarder takes it;
// its zero value, without a rate, is no limit.
func (r *Route) ForwardRate() forward.Rate {
	limit, err := parseRate(r.Rate)
	if err != nil {
		return forward.Rate{}
	}
	return forward.Rate{Limit: limit, Burst: r.Burst}
}

var rateRe = regexp.MustCompile(`^([0-9]+)/([sm])$`)

// parseRate reads a rate, "N/s" or "N/m", in requests a second; "" is
// none, 0.
func parseRate(rate string) (float64, error) {
	if rate == "" {
		return 0, nil
	}
	m := rateRe.FindStringSubmatch(rate)
	if m == nil {
		return 0, fmt.Errorf("must be requests per second or per minute, e.g. 200/s or 50/m (got %s)", rate)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > maxRate {
		return 0, fmt.Errorf("must be 1 to %d requests per second or per minute (got %s)", maxRate, rate)
	}
	if m[2] == "m" {
		return float64(n) / 60, nil
	}
	return float64(n), nil
}

// maxRate bounds a rate's count, so that its burst is a sane number.
const maxRate = 1_000_000

// defaultBurst is a tenth of a second's worth of limit, at least 1: a
// rate of 200/s starts at most 220 requests in any second, which is what
// one reads "200/s" to promise, while the forwarder still takes 20 sends
// at a time, not one.
func defaultBurst(limit float64) int {
	return max(1, int(math.Ceil(limit/10)))
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
		Storage:         Storage{Backend: Badger},
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
// in every value, fills each source's defaults and validates the result. A
// *ValidationError lists every problem, those of the file's shape and
// those of the rules, each with its YAML path and line.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(err)
	}
	// Expanding parsed values, not raw text, keeps a secret holding YAML
	// syntax (quotes, colons, newlines) from changing the document.
	check := newChecker(expandEnv(&doc))
	cfg := New()
	if doc.Kind != 0 { // an empty file means all defaults
		check.walk(&doc, reflect.TypeFor[Config](), "")
		// yaml decodes what it can around a bad value and finds no problem
		// the walk has not named.
		if err := doc.Decode(cfg); err != nil && len(check.problems) == 0 {
			return nil, fmt.Errorf("parse yaml: %s", quotedValue.ReplaceAllString(err.Error(), "a value"))
		}
	}
	_, dataDirSet := check.lines["data_dir"]
	cfg.setStorageDefaults(dataDirSet)
	for i := range cfg.Sources {
		cfg.Sources[i].setDefaults(cfg.MaxBody)
	}
	problems := cfg.compileFilters()
	if err := cfg.Validate(); err != nil {
		var verr *ValidationError
		if !errors.As(err, &verr) {
			return nil, err
		}
		problems = append(problems, verr.Problems...)
	}
	check.rules(problems)
	if len(check.problems) > 0 {
		return nil, &ValidationError{Problems: check.sorted()}
	}
	return cfg, nil
}

// compileFilters sets each route's Match, and returns the filters that do
// not compile, each with the position in the expression.
func (c *Config) compileFilters() []Problem {
	var problems []Problem
	for i := range c.Sources {
		for j := range c.Sources[i].Routes {
			r := &c.Sources[i].Routes[j]
			if r.Filter == "" {
				continue
			}
			m, err := filter.Compile(r.Filter)
			if err != nil {
				problems = append(problems, Problem{Path: fmt.Sprintf("sources[%d].routes[%d].filter", i, j), Msg: err.Error()})
				continue
			}
			r.Match = m
		}
	}
	return problems
}

// quotedValue is how yaml quotes a value in an error; it may be a secret.
var quotedValue = regexp.MustCompile("`[^`]*`")

// syntaxLine is how yaml reports a document it cannot parse.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns yaml's syntax error into a problem with its line: past
// one, the document cannot be read any further.
func syntaxError(err error) error {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &ValidationError{Problems: []Problem{{Msg: "not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	line, _ := strconv.Atoi(m[1])
	return &ValidationError{Problems: []Problem{{Line: line, Msg: "not YAML: " + m[2]}}}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces every ${NAME} in n's values and returns the scalars
// that unset variables left empty, with their names.
func expandEnv(n *yaml.Node) map[*yaml.Node][]string {
	unset := map[*yaml.Node][]string{}
	var expand func(*yaml.Node)
	expand = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
			var names []string
			n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
				name := ref[2 : len(ref)-1]
				v, ok := os.LookupEnv(name)
				if !ok {
					names = append(names, name)
				}
				return v
			})
			if n.Value == "" && len(names) > 0 {
				unset[n] = names
			}
			// An expanded value is text, whatever it looks like.
			if n.Tag == "!!str" || n.Style != 0 {
				n.Style = yaml.DoubleQuotedStyle
			}
		}
		for _, c := range n.Content {
			expand(c)
		}
	}
	expand(n)
	return unset
}

// setDefaults fills what the source leaves unset; maxBody is the global
// max_body.
func (s *Source) setDefaults(maxBody int) {
	if s.Version != "" {
		setDefault(&s.VersionFormat, versioning.Integer)
		setDefault(&s.VersionTies, versioning.TiesStale)
	}
	// Every decision's status is filled in, so that the effective
	// configuration shows what each one answers.
	if s.Responses == nil {
		s.Responses = make(map[webhookd.Decision]int, 4)
	}
	for _, d := range []webhookd.Decision{webhookd.Accepted, webhookd.Duplicate, webhookd.Stale, webhookd.Conflict} {
		s.Responses[d] = s.Status(d)
	}
	if v := s.Verify; v != nil {
		p := signature.PresetFor(v.Scheme)
		setDefault(&s.RequestID, p.RequestID)
		setDefault(&s.DeliveryID, p.DeliveryID)
		// Only a scheme that signs a timestamp has a replay window.
		if v.Signature().ReplayWindow() > 0 {
			setDefault(&v.Tolerance, signature.DefaultTolerance)
		}
		if v.Scheme == signature.HMACSHA256 {
			setDefault(&v.Encoding, "hex")
		}
	}
	if s.Verify != nil {
		setDefault(&s.MaxBody, signature.MaxBodyFor(s.Verify.Scheme))
	}
	setDefault(&s.MaxBody, maxBody)
	if len(s.Routes) == 1 {
		setDefault(&s.Routes[0].Name, DefaultRoute)
	}
	for i := range s.Routes {
		f := &s.Routes[i]
		setDefault(&f.Timeout, 10*time.Second)
		setDefault(&f.Concurrency, 8)
		setDefault(&f.MaxAttempts, 12)
		setDefault(&f.Backoff.Initial, time.Second)
		setDefault(&f.Backoff.Max, 10*time.Minute)
		if limit, err := parseRate(f.Rate); err == nil && limit > 0 {
			setDefault(&f.Burst, defaultBurst(limit))
		}
		if b := &f.Breaker; !b.Off {
			setDefault(&b.Failures, defaultBreakerFailures)
			setDefault(&b.Cooldown, defaultBreakerCooldown)
			setDefault(&b.MaxCooldown, max(defaultBreakerMaxCooldown, b.Cooldown))
		}
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

// LargestBody returns the largest max_body of any source: what the HTTP
// server must be ready to read before it knows the source.
func (c *Config) LargestBody() int {
	largest := c.MaxBody
	for _, s := range c.Sources {
		largest = max(largest, s.MaxBody)
	}
	return largest
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
	var problems []Problem
	add := func(path, format string, args ...any) {
		problems = append(problems, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	// fieldErr files an error of package signature, which reads "field: rule".
	fieldErr := func(prefix string, err error) {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		add(prefix+field, "%s", msg)
	}
	if err := validate.Struct(c); err != nil {
		var fieldErrs validator.ValidationErrors
		if !errors.As(err, &fieldErrs) {
			return fmt.Errorf("validate config: %w", err)
		}
		for _, fe := range fieldErrs {
			problems = append(problems, describe(fe))
		}
	}
	problems = append(problems, c.storageProblems()...)
	problems = append(problems, c.tlsProblems()...)
	problems = append(problems, c.tracingProblems()...)
	for i, s := range c.Sources {
		src := fmt.Sprintf("sources[%d].", i)
		if s.Version != "" && s.Resource == "" {
			add(src+"resource", "is required when version is set (the stale rule orders versions of one resource)")
		}
		if s.Version == "" && s.VersionFormat != "" {
			add(src+"version_format", "set without version")
		}
		if s.Version == "" && s.VersionTies != "" {
			add(src+"version_ties", "set without version")
		}
		if s.Verify != nil && slices.Contains(signature.Schemes(), s.Verify.Scheme) {
			if _, err := signature.New(s.Verify.Signature()); err != nil {
				fieldErr(src+"verify.", err)
			}
		}
		if s.Verify != nil {
			// A copy sent again after its receipt expired, and still within
			// tolerance, would be accepted and forwarded as new.
			if w := s.Verify.Signature().ReplayWindow(); w >= c.ReceiptTTL {
				add(src+"verify.tolerance", "a signed delivery passes for %s (the tolerance either side of its timestamp), not less than receipt_ttl %s: a copy sent after its receipt expired would be accepted again", w, c.ReceiptTTL)
			}
		}
		if s.Name == UnknownSource {
			add(src+"name", "%q is reserved: it is the metrics label of requests to no configured source", s.Name)
		}
		named := make(map[string]int, len(s.Routes))
		for j := range s.Routes {
			f := &s.Routes[j]
			route := fmt.Sprintf("%sroutes[%d].", src, j)
			switch k, seen := named[f.Name]; {
			case f.Name == "":
				add(route+"name", "is required when a source has more than one route")
			case seen:
				add(route+"name", "%q is the name of routes[%d] too: a route's name is unique in its source", f.Name, k)
			default:
				named[f.Name] = j
			}
			if f.MaxAttempts > 0 {
				// An entry still retrying when its payload expires is
				// dead-lettered without a body.
				longest := addSat(mulSat(f.MaxAttempts-1, f.Backoff.Max), mulSat(f.MaxAttempts, f.Timeout))
				if longest >= c.ReceiptTTL {
					add(route+"max_attempts", "retries may take up to %s (attempts × timeout and backoff.max), not less than receipt_ttl %s, which is how long the payload is kept", longest, c.ReceiptTTL)
				}
			}
			if _, err := parseRate(f.Rate); err != nil {
				add(route+"rate", "%s", err)
			}
			if f.Rate == "" && f.Burst != 0 {
				add(route+"burst", "set without rate")
			}
			problems = append(problems, f.breakerProblems(route)...)
			if f.Sign != nil {
				if _, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{f.Sign.Secret}}); err != nil {
					_, msg, _ := strings.Cut(err.Error(), ": ") // it names secrets[0], which is sign.secret here
					add(route+"sign.secret", "%s", msg)
				}
			}
		}
	}
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// breakerProblems checks the breaker of route r, whose YAML path is path.
func (r *Route) breakerProblems(path string) []Problem {
	var problems []Problem
	add := func(field, format string, args ...any) {
		problems = append(problems, Problem{Path: path + field, Msg: fmt.Sprintf(format, args...)})
	}
	b := r.Breaker
	if b.Off {
		if b.Failures != 0 || b.Cooldown != 0 || b.MaxCooldown != 0 {
			add("breaker.off", "is true, yet breaker.failures, cooldown or max_cooldown is set: remove them, or turn the breaker on")
		}
		return problems
	}
	if b.Failures < 1 {
		add("breaker.failures", "must be at least 1 (got %d); breaker.off: true turns the breaker off", b.Failures)
	}
	if b.Cooldown <= 0 {
		add("breaker.cooldown", "must be greater than 0 (got %s)", b.Cooldown)
	}
	if b.MaxCooldown < b.Cooldown {
		add("breaker.max_cooldown", "must not be less than breaker.cooldown (got %s, cooldown %s)", b.MaxCooldown, b.Cooldown)
	}
	// The failures before the one that opens the breaker count against
	// their entries; an entry alone in its route takes them all. With
	// fewer attempts than that run, it dies before the breaker opens.
	if b.Failures >= 1 && r.MaxAttempts >= 1 && r.MaxAttempts < b.Failures {
		add("max_attempts", "is %d, under breaker.failures %d: an entry alone in the route would be dead-lettered before the breaker opens; raise max_attempts, lower breaker.failures, or set breaker.off: true", r.MaxAttempts, b.Failures)
	}
	return problems
}

// ValidationError lists every problem found in a configuration.
type ValidationError struct{ Problems []Problem }

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid configuration:\n  " + strings.Join(lines, "\n  ")
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the field's YAML path, e.g. sources[0].request_id; empty for
	// the document as a whole.
	Path string
	// Line is where in the file the field, or the nearest section holding
	// it, is; 0 when the file does not say.
	Line int
	Msg  string
}

func (p Problem) String() string {
	s := p.Msg
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: %s", p.Line, s)
	}
	return s
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

// selectorPlace is one place a selector reads. A selector is one place, or
// several joined by '|', the first present winning; so '|', though a header
// name may hold it, is never part of a place's name.
const selectorPlace = `(json:[^.\s|]+(\.[^.\s|]+)*|header:[!#$%&'*+\-.^_` + "`" + `~0-9A-Za-z]+)`

var (
	selectorRe   = regexp.MustCompile(`^` + selectorPlace + `(\|` + selectorPlace + `)*$`)
	jsonPathRe   = regexp.MustCompile(`^[^.\s]+(\.[^.\s]+)*$`)
	sourceNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	headerNameRe = regexp.MustCompile(`^[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+$`)
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(yamlName)
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

func describe(fe validator.FieldError) Problem {
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
		rule += " (got " + got + ")"
	}
	return Problem{Path: field, Msg: rule}
}

var comparisons = map[string]string{"gt": "greater than", "gte": "at least", "min": "at least", "lt": "less than", "lte": "at most", "max": "at most"}
