{{/* The release's base name, at most 40 characters so that suffixes fit. */}}
{{- define "baton.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "baton.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "baton.controllerSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "baton.etcdSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "baton.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "baton.controller" -}}{{ include "baton.fullname" . }}-controller{{- end -}}
{{- define "baton.webhookService" -}}{{ include "baton.fullname" . }}-webhook{{- end -}}
{{- define "baton.webhookSecret" -}}{{ include "baton.fullname" . }}-webhook-tls{{- end -}}
{{- define "baton.etcd" -}}{{ include "baton.fullname" . }}-etcd{{- end -}}
{{- define "baton.etcdPeers" -}}{{ include "baton.fullname" . }}-etcd-peers{{- end -}}

{{/* The etcd client URLs, comma-separated: the given ones or the chart's etcd. */}}
{{- define "baton.etcdEndpoints" -}}
{{- if .Values.etcd.endpoints -}}
{{- join "," .Values.etcd.endpoints -}}
{{- else -}}
{{- printf "http://%s.%s.svc:2379" (include "baton.etcd" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}
