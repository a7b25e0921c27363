// Package tracing sets up OpenTelemetry tracing: an OTLP/HTTP exporter
// and a tracer provider, configured by the standard OTEL_* environment
// variables or by the configuration's tracing section, and the W3C trace
// context that carries a delivery's trace from its intake to every
// forward attempt.
//
// Tracing is off unless an endpoint is named; then Tracer is nil, and the
// intake and the forwarder skip every span, so that it costs nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of webhookd's spans, and the service
// name unless OTEL_SERVICE_NAME or the configuration sets one.
const Name = "webhookd"

// Config is the tracing section of the configuration. Each field set
// takes the place of the environment variable it names; an empty one
// leaves that variable in charge.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT),
	// e.g. http://collector:4318; spans go to its /v1/traces.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of new traces sampled (OTEL_TRACES_SAMPLER
	// parentbased_traceidratio with this OTEL_TRACES_SAMPLER_ARG); a
	// continued trace follows its parent's decision.
	SampleRatio *float64 `yaml:"sample_ratio" validate:"omitempty,gte=0,lte=1"`
	// ServiceName is the service.name resource attribute (OTEL_SERVICE_NAME).
	ServiceName string `yaml:"service_name"`
}

// Tracing is the process's tracer provider, or nothing when tracing is off.
type Tracing struct {
	// Tracer makes webhookd's spans; nil when tracing is off.
	Tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// New sets tracing up from cfg and the environment (getenv, os.Getenv in
// the binary). It is off, and exports nothing, unless cfg or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT names
// an endpoint, or when OTEL_SDK_DISABLED is true.
func New(ctx context.Context, cfg Config, getenv func(string) string) (*Tracing, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{}, nil
	}
	if cfg.Endpoint == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return &Tracing{}, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, err := EndpointURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exporter, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	// A later detector's attribute wins: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES over the default name, the section's name
	// over both.
	detectors := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(attribute.String("service.name", Name)),
		resource.WithFromEnv()}
	if cfg.ServiceName != "" {
		detectors = append(detectors, resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	}
	res, err := resource.New(ctx, detectors...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if cfg.SampleRatio != nil {
		popts = append(popts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*cfg.SampleRatio))))
	}
	// Without a ratio the provider reads OTEL_TRACES_SAMPLER and its
	// argument itself; its default is parentbased_always_on.
	provider := sdktrace.NewTracerProvider(popts...)
	return &Tracing{Tracer: provider.Tracer(Name), provider: provider}, nil
}

// EndpointURL is the traces URL of a collector's OTLP/HTTP base URL, as
// the exporter derives it from OTEL_EXPORTER_OTLP_ENDPOINT: its path
// followed by /v1/traces.
func EndpointURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("tracing: endpoint must be an http or https URL, e.g. http://collector:4318")
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String(), nil
}

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t.Tracer != nil }

// Shutdown exports the spans still buffered and stops the exporter; it
// runs last at shutdown, after the intake and the forwarder made theirs.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Extract returns ctx holding the remote span context that carrier's
// traceparent names, or ctx when it names none or a malformed one.
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// Traceparent is the W3C traceparent header value that names sc, or ""
// when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags
}

// Parent returns ctx holding the remote span context traceparent names:
// an outbox entry's trace, so that its attempt's span joins the trace of
// the request that accepted it. A traceparent that is empty or malformed
// leaves ctx as it is, and the attempt starts a trace of its own.
func Parent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
