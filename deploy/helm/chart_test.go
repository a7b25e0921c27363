// Package helm holds webhookd's Helm chart, deploy/helm/webhookd. The
// tests render it with the helm binary, for both storage backends, and
// check the manifests against what webhookd needs: its configuration, its
// ports and probes, its storage, its secrets and the alert rules of
// docs/operations.md.
package helm

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd/configs"
)

const chart = "webhookd"

// helmBinary returns the helm to render with: $WEBHOOKD_HELM, else helm on
// PATH. The tests skip without one; .ci/run installs it.
func helmBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WEBHOOKD_HELM"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not found: set WEBHOOKD_HELM or put helm on PATH (go install helm.sh/helm/v3/cmd/helm@v3.22.0, as .ci/run does)")
	}
	return bin
}

// object is one rendered manifest.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	node yaml.Node
}

func (o *object) decode(t *testing.T, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
}

// helmTemplate runs helm template on the chart with args and returns its
// output and error.
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "test", chart, "--namespace", "hooks"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(stderr.String())
	}
	return out, nil
}

// render renders the chart with args and returns its objects, by kind.
func render(t *testing.T, args ...string) map[string][]*object {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	objects := map[string][]*object{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		o := &object{}
		err := dec.Decode(&o.node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered manifests: %v", err)
		}
		if o.node.Kind == 0 {
			continue // an empty document
		}
		o.decode(t, o)
		objects[o.Kind] = append(objects[o.Kind], o)
	}
	return objects
}

// one returns the only object of kind.
func one(t *testing.T, objects map[string][]*object, kind string) *object {
	t.Helper()
	if n := len(objects[kind]); n != 1 {
		t.Fatalf("%d objects of kind %s, want 1", n, kind)
	}
	return objects[kind][0]
}

type secretRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom struct {
		SecretKeyRef *secretRef `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet struct {
		Path   string `yaml:"path"`
		Port   string `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

type seccomp struct {
	Type string `yaml:"type"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env             []envVar `yaml:"env"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
		SeccompProfile seccomp `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

// env returns the container's variable name, or nil.
func (c *container) env(name string) *envVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// port returns the number of the container's port name, or 0.
func (c *container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// mount returns the path volume is mounted at, or "".
func (c *container) mount(volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// serviceMonitor is the part of a ServiceMonitor the tests check.
type serviceMonitor struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Endpoints []struct {
			Port        string         `yaml:"port"`
			Path        string         `yaml:"path"`
			Scheme      string         `yaml:"scheme"`
			TLSConfig   map[string]any `yaml:"tlsConfig"`
			Relabelings []struct {
				TargetLabel string `yaml:"targetLabel"`
				Replacement string `yaml:"replacement"`
			} `yaml:"relabelings"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type workload struct {
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
				SecurityContext              struct {
					RunAsNonRoot   *bool   `yaml:"runAsNonRoot"`
					RunAsUser      int     `yaml:"runAsUser"`
					FSGroup        int     `yaml:"fsGroup"`
					SeccompProfile seccomp `yaml:"seccompProfile"`
				} `yaml:"securityContext"`
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				AccessModes []string `yaml:"accessModes"`
				Resources   struct {
					Requests map[string]string `yaml:"requests"`
				} `yaml:"resources"`
			} `yaml:"spec"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

// deployed is what both modes are checked on: the workload, its
// container, and the configuration webhookd reads.
type deployed struct {
	workload  workload
	container *container
	config    *configs.Config
}

// checkCommon checks what does not depend on the backend: the workload
// of kind (and no other), the configuration mounted where the container
// reads it, the probes on the listener that serves them, the Services,
// the security context, the memory limit and the admin token's Secret. It
// returns what the backend's checks need.
func checkCommon(t *testing.T, objects map[string][]*object, kind string) deployed {
	t.Helper()
	other := map[string]string{"StatefulSet": "Deployment", "Deployment": "StatefulSet"}[kind]
	if n := len(objects[other]); n != 0 {
		t.Errorf("%d objects of kind %s besides the %s", n, other, kind)
	}
	var d deployed
	one(t, objects, kind).decode(t, &d.workload)
	pod := &d.workload.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := &pod.Containers[0]
	d.container = c
	if c.Image != "webhookd:ci" {
		t.Errorf("image %q, want webhookd:ci from image.repository and image.tag", c.Image)
	}

	// The configuration: the ConfigMap, mounted where --config reads it.
	var cm struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
	}
	one(t, objects, "ConfigMap").decode(t, &cm)
	var configVolume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			configVolume = v.Name
		}
	}
	dir := c.mount(configVolume)
	if configVolume == "" || dir == "" {
		t.Fatalf("ConfigMap %s is not mounted in the container", cm.Metadata.Name)
	}
	wantArgs := []string{"serve", "--config", dir + "/webhookd.yaml"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	t.Setenv("WEBHOOKD_ADMIN_TOKEN", "admin-token")
	t.Setenv("WEBHOOKD_POSTGRES_DSN", "postgres://webhookd:secret@db:5432/webhookd")
	cfg, err := configs.Parse([]byte(cm.Data["webhookd.yaml"]))
	if err != nil {
		t.Fatalf("the ConfigMap's webhookd.yaml: %v\n%s", err, cm.Data["webhookd.yaml"])
	}
	d.config = cfg
	if cfg.Admin.Token != "admin-token" {
		t.Errorf("admin.token %q, want it from WEBHOOKD_ADMIN_TOKEN", cfg.Admin.Token)
	}
	if ref := secretOf(c.env("WEBHOOKD_ADMIN_TOKEN")); ref != (secretRef{Name: "webhookd-admin", Key: "token"}) {
		t.Errorf("WEBHOOKD_ADMIN_TOKEN from %+v, want the Secret adminToken.existingSecret names", ref)
	}

	// The listeners, on all of the pod's interfaces, at its ports.
	listeners := map[string]string{"http": cfg.Listen, "admin": cfg.Admin.Listen}
	for name, addr := range listeners {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("listener %s: %v", addr, err)
		}
		if host != "" && host != "0.0.0.0" {
			t.Errorf("%s listens on %s, which other pods cannot reach", name, addr)
		}
		if port != strconv.Itoa(c.port(name)) {
			t.Errorf("container port %s is %d, but webhookd listens on %s", name, c.port(name), addr)
		}
	}

	// The probes: /healthz and /readyz are served by the public listener.
	probes := []struct {
		name  string
		probe *probe
		path  string
	}{
		{"startup", c.StartupProbe, "/healthz"},
		{"liveness", c.LivenessProbe, "/healthz"},
		{"readiness", c.ReadinessProbe, "/readyz"},
	}
	for _, p := range probes {
		if p.probe == nil {
			t.Errorf("no %s probe", p.name)
			continue
		}
		if got := p.probe.HTTPGet; got.Path != p.path || got.Port != "http" || got.Scheme != "HTTP" {
			t.Errorf("%s probe GET %s on port %q over %s, want GET %s on http (%s) over HTTP", p.name, got.Path, got.Port, got.Scheme, p.path, cfg.Listen)
		}
	}

	// The Services: public and admin, each at its container port, both
	// selecting the pods.
	for _, o := range objects["Service"] {
		var svc struct {
			Spec struct {
				Selector map[string]string `yaml:"selector"`
				Ports    []struct {
					TargetPort string `yaml:"targetPort"`
				} `yaml:"ports"`
			} `yaml:"spec"`
		}
		o.decode(t, &svc)
		if !subset(svc.Spec.Selector, d.workload.Spec.Template.Metadata.Labels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selects %v, not the pods (%v)", o.Metadata.Name, svc.Spec.Selector, d.workload.Spec.Template.Metadata.Labels)
		}
		for _, p := range svc.Spec.Ports {
			delete(listeners, p.TargetPort)
		}
	}
	if len(listeners) != 0 {
		t.Errorf("no Service for the container ports %v", listeners)
	}
	if sel := d.workload.Spec.Selector.MatchLabels; len(sel) == 0 || !subset(sel, d.workload.Spec.Template.Metadata.Labels) {
		t.Errorf("the workload's selector %v does not select its pods", d.workload.Spec.Selector.MatchLabels)
	}

	// Security: non-root, no privileges, a read-only root filesystem.
	psc := pod.SecurityContext
	if !isTrue(psc.RunAsNonRoot) || psc.RunAsUser == 0 || psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod security context: runAsNonRoot %v, runAsUser %d, seccomp %q; want non-root and seccomp RuntimeDefault",
			deref(psc.RunAsNonRoot), psc.RunAsUser, psc.SeccompProfile.Type)
	}
	if psc.FSGroup != 65532 {
		t.Errorf("fsGroup %d, want 65532, the image's user, so that it can write its volume", psc.FSGroup)
	}
	csc := c.SecurityContext
	if !isTrue(csc.RunAsNonRoot) || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		!isTrue(csc.ReadOnlyRootFilesystem) || !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) ||
		csc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("container security context: runAsNonRoot %v, allowPrivilegeEscalation %v, readOnlyRootFilesystem %v, capabilities dropped %q, seccomp %q; "+
			"want non-root, no privilege escalation, a read-only root filesystem, capabilities ALL dropped, seccomp RuntimeDefault",
			deref(csc.RunAsNonRoot), deref(csc.AllowPrivilegeEscalation), deref(csc.ReadOnlyRootFilesystem), csc.Capabilities.Drop, csc.SeccompProfile.Type)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; webhookd does not call the Kubernetes API")
	}

	// Memory: webhookd sizes itself from its cgroup's limit, which
	// limits.memory sets; GOMEMLIMIT would override the three quarters it
	// takes of it.
	if c.Resources.Limits["memory"] != "2Gi" {
		t.Errorf("memory limit %q, want 2Gi, from resources.limits.memory", c.Resources.Limits["memory"])
	}
	if c.env("GOMEMLIMIT") != nil {
		t.Error("GOMEMLIMIT is set: webhookd would take it as its soft limit instead of three quarters of the container's")
	}
	return d
}

func secretOf(v *envVar) secretRef {
	if v == nil || v.ValueFrom.SecretKeyRef == nil {
		return secretRef{}
	}
	return *v.ValueFrom.SecretKeyRef
}

func isTrue(b *bool) bool { return b != nil && *b }

// deref returns *p, or nil when p is, for messages.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// subset says whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestBadger checks Badger mode: a StatefulSet of one pod, its data_dir on
// a PersistentVolumeClaim.
func TestBadger(t *testing.T) {
	objects := render(t, "-f", chart+"/ci/badger-values.yaml")
	d := checkCommon(t, objects, "StatefulSet")
	if r := d.workload.Spec.Replicas; r == nil || *r != 1 {
		t.Errorf("replicas %v, want 1: Badger locks its directory", deref(r))
	}
	if d.config.Storage.Backend != configs.Badger {
		t.Errorf("storage.backend %q, want badger", d.config.Storage.Backend)
	}
	claims := d.workload.Spec.VolumeClaimTemplates
	if len(claims) != 1 {
		t.Fatalf("%d volume claim templates, want 1", len(claims))
	}
	claim := claims[0]
	if got := d.container.mount(claim.Metadata.Name); got == "" || got != d.config.DataDir {
		t.Errorf("the claim %s is mounted at %q, but data_dir is %q", claim.Metadata.Name, got, d.config.DataDir)
	}
	if claim.Spec.Resources.Requests["storage"] != "20Gi" || !slices.Equal(claim.Spec.AccessModes, []string{"ReadWriteOnce"}) {
		t.Errorf("claim %+v, want ReadWriteOnce of storage.badger.size (20Gi)", claim.Spec)
	}
	if d.container.env("WEBHOOKD_POSTGRES_DSN") != nil {
		t.Error("Badger mode sets WEBHOOKD_POSTGRES_DSN")
	}
}

// TestPostgres checks PostgreSQL mode: a Deployment of the replicas asked
// for, the DSN from the existing Secret the values name, and no volume.
func TestPostgres(t *testing.T) {
	objects := render(t, "-f", chart+"/ci/postgres-values.yaml")
	d := checkCommon(t, objects, "Deployment")
	if r := d.workload.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("replicas %v, want 3, storage.postgres.replicas", deref(r))
	}
	if d.config.Storage.Backend != configs.Postgres || d.config.DataDir != "" {
		t.Errorf("storage.backend %q, data_dir %q: want postgres, and no data_dir", d.config.Storage.Backend, d.config.DataDir)
	}
	if d.config.Storage.DSN != os.Getenv("WEBHOOKD_POSTGRES_DSN") {
		t.Errorf("storage.dsn %q, want it from WEBHOOKD_POSTGRES_DSN", d.config.Storage.DSN)
	}
	if ref := secretOf(d.container.env("WEBHOOKD_POSTGRES_DSN")); ref != (secretRef{Name: "webhookd-postgres", Key: "dsn"}) {
		t.Errorf("WEBHOOKD_POSTGRES_DSN from %+v, want the Secret storage.postgres.dsn.existingSecret names", ref)
	}
	if len(d.workload.Spec.VolumeClaimTemplates) != 0 || d.container.mount("data") != "" {
		t.Error("PostgreSQL mode has a data volume")
	}
	if n := len(objects["Secret"]); n != 0 {
		t.Errorf("%d Secrets, want none: both secrets exist already", n)
	}
}

// TestPostgresSecretFromValues checks the Secret the chart creates when the
// values hold the DSN and the token rather than name Secrets.
func TestPostgresSecretFromValues(t *testing.T) {
	const dsn = "postgres://webhookd:p%40ss@db:5432/webhookd"
	objects := render(t, "--set", "image.tag=ci", "--set", "storage.backend=postgres",
		"--set", "storage.postgres.dsn.value="+dsn, "--set", "adminToken.value=token")
	var secret struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		StringData map[string]string `yaml:"stringData"`
	}
	one(t, objects, "Secret").decode(t, &secret)
	var w workload
	one(t, objects, "Deployment").decode(t, &w)
	c := &w.Spec.Template.Spec.Containers[0]
	for env, want := range map[string]string{"WEBHOOKD_POSTGRES_DSN": dsn, "WEBHOOKD_ADMIN_TOKEN": "token"} {
		ref := secretOf(c.env(env))
		if ref.Name != secret.Metadata.Name || secret.StringData[ref.Key] != want {
			t.Errorf("%s from %+v, which holds %q; want %q", env, ref, secret.StringData[ref.Key], want)
		}
	}
}

// TestRefused checks that values the chart cannot deploy fail the
// rendering with a message naming the value.
func TestRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no image tag", nil, "image.tag"},
		{"postgres without a DSN", []string{"--set", "storage.backend=postgres"}, "storage.postgres.dsn"},
		{"an unknown backend", []string{"--set", "storage.backend=mysql"}, "storage.backend must be badger or postgres"},
		{"a listener of the values", []string{"--set", "config.listen=:9090"}, "config.listen is set by the chart"},
		{"an admin listener of the values", []string{"--set", "config.admin.listen=127.0.0.1:8081"}, "config.admin.listen is set by the chart"},
		{"a data_dir of the values", []string{"--set", "config.data_dir=/srv"}, "config.data_dir is set by the chart"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.want != "image.tag" {
				args = append(args, "--set", "image.tag=ci")
			}
			_, err := helmTemplate(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %s: %v, want an error naming %q", strings.Join(args, " "), err, tc.want)
			}
		})
	}
}

// TestMonitoring checks the Prometheus Operator objects: none by default;
// when enabled, a ServiceMonitor scraping /metrics on the admin Service as
// job webhookd, and a PrometheusRule holding docs/operations.md's alert
// rules as they stand there.
func TestMonitoring(t *testing.T) {
	plain := render(t, "--set", "image.tag=ci")
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		if n := len(plain[kind]); n != 0 {
			t.Errorf("%d objects of kind %s by default, want none", n, kind)
		}
	}

	objects := render(t, "-f", chart+"/ci/badger-values.yaml")
	var sm serviceMonitor
	one(t, objects, "ServiceMonitor").decode(t, &sm)
	var scraped []string
	for _, svc := range objects["Service"] {
		if subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
			scraped = append(scraped, svc.Metadata.Name)
		}
	}
	if !slices.Equal(scraped, []string{"test-webhookd-admin"}) {
		t.Errorf("the ServiceMonitor selects the Services %q, want the admin Service only", scraped)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "admin" || ep.Path != "/metrics" || ep.Scheme != "" {
		t.Errorf("scrapes %s on port %s over %q, want /metrics on admin over http", ep.Path, ep.Port, ep.Scheme)
	}
	if len(ep.Relabelings) != 1 || ep.Relabelings[0].TargetLabel != "job" || ep.Relabelings[0].Replacement != "webhookd" {
		t.Errorf("relabelings %+v, want job=webhookd, which the rule WebhookdDown names", ep.Relabelings)
	}

	var rule struct {
		Spec ruleFile `yaml:"spec"`
	}
	one(t, objects, "PrometheusRule").decode(t, &rule)
	if want := documentedRules(t); !reflect.DeepEqual(rule.Spec, want) {
		t.Errorf("the PrometheusRule's rules\n%+v\ndiffer from docs/operations.md's\n%+v", rule.Spec, want)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
			For   string `yaml:"for"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// documentedRules reads the alert rules of docs/operations.md: the YAML
// block of its section Alerts.
func documentedRules(t *testing.T) ruleFile {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Alerts\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/operations.md has no YAML block under ### Alerts")
	}
	var rules ruleFile
	if err := yaml.Unmarshal([]byte(block), &rules); err != nil {
		t.Fatalf("docs/operations.md's alert rules: %v", err)
	}
	if len(rules.Groups) == 0 || len(rules.Groups[0].Rules) == 0 {
		t.Fatal("docs/operations.md's alert rules hold no rule")
	}
	return rules
}

// TestDocumentedValues renders the chart with the values file of
// docs/operations.md's section Kubernetes and checks that webhookd takes
// the configuration it gives, its source's secret from the Secret named.
func TestDocumentedValues(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Kubernetes\n")
	_, block, ok := strings.Cut(section, "```yaml\n# webhookd-values.yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md's section Kubernetes has no YAML block starting # webhookd-values.yaml")
	}
	values := filepath.Join(t.TempDir(), "webhookd-values.yaml")
	if err := os.WriteFile(values, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			objects := render(t, "-f", values, "--set", "storage.backend="+backend,
				"--set", "storage.postgres.dsn.existingSecret=webhookd-postgres")
			var w workload
			kind := map[string]string{"badger": "StatefulSet", "postgres": "Deployment"}[backend]
			one(t, objects, kind).decode(t, &w)
			c := &w.Spec.Template.Spec.Containers[0]
			if ref := secretOf(c.env("STRIPE_WEBHOOK_SECRET")); ref != (secretRef{Name: "stripe", Key: "signing-secret"}) {
				t.Errorf("STRIPE_WEBHOOK_SECRET from %+v, want extraEnv's Secret", ref)
			}
			var cm struct {
				Data map[string]string `yaml:"data"`
			}
			one(t, objects, "ConfigMap").decode(t, &cm)
			t.Setenv("WEBHOOKD_ADMIN_TOKEN", "admin-token")
			t.Setenv("WEBHOOKD_POSTGRES_DSN", "postgres://webhookd@db/webhookd")
			t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_test")
			cfg, err := configs.Parse([]byte(cm.Data["webhookd.yaml"]))
			if err != nil {
				t.Fatalf("the ConfigMap's webhookd.yaml: %v\n%s", err, cm.Data["webhookd.yaml"])
			}
			if len(cfg.Sources) != 1 || cfg.Sources[0].Verify == nil || !slices.Equal(cfg.Sources[0].Verify.Secrets, []string{"whsec_test"}) {
				t.Errorf("sources %+v, want stripe verified with STRIPE_WEBHOOK_SECRET", cfg.Sources)
			}
			if cfg.Storage.Backend != backend {
				t.Errorf("storage.backend %q, want %s", cfg.Storage.Backend, backend)
			}
		})
	}
}

// TestTLS checks the chart with listeners over TLS: the certificates'
// Secret mounted where the configuration names its files, the probes over
// HTTPS, and the scrape of the admin listener over https, trusting what
// the values say.
func TestTLS(t *testing.T) {
	objects := render(t, "-f", chart+"/ci/badger-values.yaml",
		"--set", "config.tls.cert_file=/tls/tls.crt", "--set", "config.tls.key_file=/tls/tls.key",
		"--set", "config.admin.tls.cert_file=/tls/tls.crt", "--set", "config.admin.tls.key_file=/tls/tls.key",
		"--set-json", `extraVolumes=[{"name":"tls","secret":{"secretName":"webhookd-tls"}}]`,
		"--set-json", `extraVolumeMounts=[{"name":"tls","mountPath":"/tls","readOnly":true}]`,
		"--set-json", `serviceMonitor.tlsConfig={"serverName":"webhookd-admin"}`)
	var w workload
	one(t, objects, "StatefulSet").decode(t, &w)
	c := &w.Spec.Template.Spec.Containers[0]
	for name, p := range map[string]*probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet.Scheme != "HTTPS" {
			t.Errorf("%s probe %+v, want it over HTTPS", name, p)
		}
	}
	var secret string
	for _, v := range w.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if secret != "webhookd-tls" || c.mount("tls") != "/tls" {
		t.Errorf("the Secret %q is mounted at %q, want webhookd-tls at /tls", secret, c.mount("tls"))
	}
	var sm serviceMonitor
	one(t, objects, "ServiceMonitor").decode(t, &sm)
	if ep := sm.Spec.Endpoints[0]; ep.Scheme != "https" || ep.TLSConfig["serverName"] != "webhookd-admin" {
		t.Errorf("scrapes over %q with %v, want https with serviceMonitor.tlsConfig", ep.Scheme, ep.TLSConfig)
	}
}
