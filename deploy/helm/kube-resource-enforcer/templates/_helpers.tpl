{{/* Helpers of the kube-resource-enforcer chart: labels, names, checks of the values. */}}

{{/* The labels deploy/ puts on every object and pod of COMPONENT (webhook | enforcer). */}}
{{- define "kre.selectorName" -}}
{{- if eq . "webhook" }}resource-webhook{{ else }}resource-enforcer{{ end -}}
{{- end }}

{{- define "kre.podLabels" -}}
app.kubernetes.io/name: {{ include "kre.selectorName" . }}
app.kubernetes.io/component: {{ . }}
app.kubernetes.io/part-of: kube-resource-enforcer
{{- end }}

{{/* Object labels: deploy/'s, plus Helm's own. Argument: (list $ COMPONENT). */}}
{{- define "kre.labels" -}}
{{ include "kre.podLabels" (index . 1) }}
{{ include "kre.helmLabels" (index . 0) }}
{{- end }}

{{/* Helm's own labels. */}}
{{- define "kre.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "kre.image" -}}
{{ .repository }}:{{ .tag }}
{{- end }}

{{/* The checks of the values, each failing with the key it is about. */}}
{{- define "kre.validate" -}}
{{- if not (has .Values.mode (list "relay" "nri")) }}
{{- fail (printf "mode: must be relay or nri, not %q" (toString .Values.mode)) }}
{{- end }}
{{- if not (has .Values.certificates.source (list "generate" "provided" "cert-manager")) }}
{{- fail (printf "certificates.source: must be generate, provided or cert-manager, not %q" (toString .Values.certificates.source)) }}
{{- end }}
{{- if eq .Values.certificates.source "provided" }}
{{- range $k := list "caCert" "tlsCert" "tlsKey" }}
{{- if not (index $.Values.certificates.provided $k) }}
{{- fail (printf "certificates.provided.%s: PEM text is needed when certificates.source is provided" $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) }}
{{- fail (printf "webhook.failurePolicy: must be Fail or Ignore, not %q" (toString .Values.webhook.failurePolicy)) }}
{{- end }}
{{- if not (regexMatch "^[0-9]{2}$" (toString .Values.enforcer.nri.pluginIndex)) }}
{{- fail (printf "enforcer.nri.pluginIndex: two digits (00-99), not %q" (toString .Values.enforcer.nri.pluginIndex)) }}
{{- end }}
{{- if not (kindIs "map" .Values.config) }}
{{- fail "config: must be a map (the configuration file's YAML, docs/configuration.md)" }}
{{- end }}
{{- end }}
