{{/* The name of the chart's objects: the release's, with the chart's unless it holds it. */}}
{{- define "webhookd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "webhookd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "webhookd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webhookd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "webhookd.labels" -}}
{{ include "webhookd.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "webhookd.postgres" -}}
{{- if eq .Values.storage.backend "postgres" -}}true{{- else if ne .Values.storage.backend "badger" -}}
{{- fail (printf "storage.backend must be badger or postgres, not %q" .Values.storage.backend) -}}
{{- end -}}
{{- end -}}

{{/*
The Secret holding the DSN and its key: the existing one the values name,
or the chart's own.
*/}}
{{- define "webhookd.dsnSecret" -}}
{{- with .Values.storage.postgres.dsn -}}
{{- if .existingSecret -}}{{ .existingSecret }}{{- else if .value -}}{{ include "webhookd.fullname" $ }}{{- else -}}
{{- fail "storage.backend postgres needs the DSN: storage.postgres.dsn.existingSecret (a Secret holding it) or storage.postgres.dsn.value" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "webhookd.dsnKey" -}}
{{- if .Values.storage.postgres.dsn.existingSecret -}}{{ .Values.storage.postgres.dsn.key }}{{- else -}}postgres-dsn{{- end -}}
{{- end -}}

{{- define "webhookd.adminTokenSecret" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecret }}{{- else if .Values.adminToken.value -}}{{ include "webhookd.fullname" . }}{{- end -}}
{{- end -}}

{{- define "webhookd.adminTokenKey" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.key }}{{- else -}}admin-token{{- end -}}
{{- end -}}

{{/*
webhookd.yaml: the values' config with what the pod needs added. The
listeners listen on all of the pod's interfaces, at the ports the
containers, the probes and the Services name; the secrets come from the
environment, which the Secrets fill. The values may not set these
themselves: a listener elsewhere would fail the probes.
*/}}
{{- define "webhookd.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $admin := get $cfg "admin" | default (dict) -}}
{{- $storage := get $cfg "storage" | default (dict) -}}
{{- range $key, $set := dict "listen" (hasKey $cfg "listen") "data_dir" (hasKey $cfg "data_dir") "admin.listen" (hasKey $admin "listen") "admin.token" (hasKey $admin "token") "storage.backend" (hasKey $storage "backend") "storage.dsn" (hasKey $storage "dsn") -}}
{{- if $set -}}
{{- fail (printf "config.%s is set by the chart; remove it from the values (docs/operations.md, Kubernetes)" $key) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "listen" ":8080" -}}
{{- $_ := set $admin "listen" "0.0.0.0:8081" -}}
{{- $_ := set $admin "token" "${WEBHOOKD_ADMIN_TOKEN}" -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- if include "webhookd.postgres" . -}}
{{- $_ := set $storage "backend" "postgres" -}}
{{- $_ := set $storage "dsn" "${WEBHOOKD_POSTGRES_DSN}" -}}
{{- else -}}
{{- $_ := set $storage "backend" "badger" -}}
{{- $_ := set $cfg "data_dir" "/data" -}}
{{- end -}}
{{- $_ := set $cfg "storage" $storage -}}
{{- toYaml $cfg -}}
{{- end -}}
