{{/* The chart's name: nameOverride or baton. */}}
{{- define "baton.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name, at most 40 characters so that suffixes fit:
     fullnameOverride, else the release's name with the chart's unless it has it. */}}
{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "baton.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "baton.labels" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "baton.controllerSelector" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "baton.etcdSelector" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "baton.etcdProxySelector" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd-proxy
{{- end -}}

{{/* The etcd client URLs of the injected sidecars, comma-separated: their
     node's etcd proxy (etcd.proxy), else the controller's. */}}
{{- define "baton.sidecarEtcdEndpoints" -}}
{{- if .Values.etcd.proxy.enabled -}}
{{- printf "http://%s.%s.svc:%d" (include "baton.etcdProxy" .) .Release.Namespace (int .Values.etcd.proxy.port) -}}
{{- else -}}
{{- include "baton.etcdEndpoints" . -}}
{{- end -}}
{{- end -}}

{{- define "baton.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "baton.controller" -}}{{ include "baton.fullname" . }}-controller{{- end -}}
{{- define "baton.webhookService" -}}{{ include "baton.fullname" . }}-webhook{{- end -}}
{{- define "baton.webhookSecret" -}}{{ include "baton.fullname" . }}-webhook-tls{{- end -}}
{{- define "baton.etcd" -}}{{ include "baton.fullname" . }}-etcd{{- end -}}
{{- define "baton.etcdProxy" -}}{{ include "baton.fullname" . }}-etcd-proxy{{- end -}}
{{- define "baton.etcdPeers" -}}{{ include "baton.fullname" . }}-etcd-peers{{- end -}}

{{/* "true" when the chart runs its own etcd secured by the controller:
     TLS, client certificates and a user per namespace. */}}
{{- define "baton.etcdManaged" -}}
{{- if and (not .Values.etcd.endpoints) .Values.etcd.secure -}}true{{- end -}}
{{- end -}}
{{- define "baton.etcdScheme" -}}{{ if include "baton.etcdManaged" . }}https{{ else }}http{{ end }}{{- end -}}
{{/* The ConfigMap keeping the fences' high-water mark; made by the
     controller, and left behind by helm uninstall on purpose. */}}
{{- define "baton.fencesConfigMap" -}}{{ include "baton.fullname" . }}-fences{{- end -}}
{{- define "baton.etcdCASecret" -}}{{ include "baton.etcd" . }}-ca{{- end -}}
{{- define "baton.etcdServerSecret" -}}{{ include "baton.etcd" . }}-tls{{- end -}}

{{/* The names in the chart's etcd's certificate: its Service, each member
     (for clients and peers), and loopback (etcd's own client). */}}
{{- define "baton.etcdServerNames" -}}
{{- $ns := .Release.Namespace -}}
{{- $etcd := include "baton.etcd" . -}}
{{- $peers := include "baton.etcdPeers" . -}}
{{- list $etcd (printf "%s.%s.svc" $etcd $ns) (printf "%s.%s.svc.cluster.local" $etcd $ns) (printf "*.%s.%s.svc" $peers $ns) (printf "*.%s.%s.svc.cluster.local" $peers $ns) "localhost" "127.0.0.1" | join "," -}}
{{- end -}}

{{/* baton.etcdSelector as a label selector string: key=value, comma-separated. */}}
{{- define "baton.etcdSelectorString" -}}
{{- $sel := include "baton.etcdSelector" . | fromYaml -}}
{{- $pairs := list -}}
{{- range $k := keys $sel | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" $k (get $sel $k)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The chart's etcd's members as its --initial-cluster: name=peer URL, comma-separated. */}}
{{- define "baton.etcdInitialCluster" -}}
{{- $name := include "baton.etcd" . -}}
{{- $peers := include "baton.etcdPeers" . -}}
{{- $scheme := include "baton.etcdScheme" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $members = append $members (printf "%s-%d=%s://%s-%d.%s.%s.svc:2380" $name $i $scheme $name $i $peers $.Release.Namespace) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* The etcd client URLs, comma-separated: the given ones or the chart's etcd. */}}
{{- define "baton.etcdEndpoints" -}}
{{- if .Values.etcd.endpoints -}}
{{- join "," .Values.etcd.endpoints -}}
{{- else -}}
{{- printf "%s://%s.%s.svc:2379" (include "baton.etcdScheme" .) (include "baton.etcd" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The pod-level settings every component's pods share: pull secrets,
     priority class and spread constraints (each without a labelSelector
     gets the component's), from the component's values (.values) and its
     selector (.selector). */}}
{{- define "baton.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{ toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" ($.selector | fromYaml)))) | indent 4 | trim }}
  {{- end }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* How etcd's members spread over nodes: "hard" (they require distinct
     nodes) or "soft" (they prefer them). etcd.antiAffinity auto is hard
     when the running StatefulSet's is (an upgrade never loosens it), or
     when the cluster has at least etcd.replicas nodes etcd can run on
     (baton.schedulableNodes), as helm install and upgrade see them
     (lookup); else soft, and the notes say so. helm template sees no
     cluster: soft. */}}
{{- define "baton.etcdAntiAffinity" -}}
{{- if eq .Values.etcd.antiAffinity "auto" -}}
{{- $sts := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "baton.etcd" .) -}}
{{- $running := dig "spec" "template" "spec" "affinity" "podAntiAffinity" "requiredDuringSchedulingIgnoredDuringExecution" list $sts -}}
{{- if or $running (ge (int (include "baton.schedulableNodes" .)) (int .Values.etcd.replicas)) }}hard{{ else }}soft{{ end -}}
{{- else -}}
{{- .Values.etcd.antiAffinity -}}
{{- end -}}
{{- end -}}

{{/* The nodes etcd can run on, as lookup sees them: Ready, schedulable,
     with the labels of etcd.nodeSelector, and each NoSchedule or
     NoExecute taint tolerated by etcd.tolerations. */}}
{{- define "baton.schedulableNodes" -}}
{{- $n := 0 -}}
{{- $sel := .Values.etcd.nodeSelector | default dict -}}
{{- $tols := .Values.etcd.tolerations | default list -}}
{{- range (lookup "v1" "Node" "" "").items -}}
{{- $node := . -}}
{{- $ok := not (dig "spec" "unschedulable" false $node) -}}
{{- $ready := false -}}
{{- range (dig "status" "conditions" list $node) -}}{{- if and (eq .type "Ready") (eq .status "True") -}}{{- $ready = true -}}{{- end -}}{{- end -}}
{{- $ok = and $ok $ready -}}
{{- $labels := dig "metadata" "labels" dict $node -}}
{{- range $k, $v := $sel -}}{{- if ne (toString (get $labels $k)) (toString $v) -}}{{- $ok = false -}}{{- end -}}{{- end -}}
{{- range (dig "spec" "taints" list $node) -}}
{{- $taint := . -}}
{{- if or (eq $taint.effect "NoSchedule") (eq $taint.effect "NoExecute") -}}
{{- $tolerated := false -}}
{{- range $tols -}}
{{- $exists := eq (.operator | default "Equal") "Exists" -}}
{{- $keyOK := or (eq (.key | default "") $taint.key) (and $exists (eq (.key | default "") "")) -}}
{{- $valueOK := or $exists (eq (toString (.value | default "")) (toString ($taint.value | default ""))) -}}
{{- $effectOK := or (eq (.effect | default "") "") (eq .effect $taint.effect) -}}
{{- if and $keyOK $valueOK $effectOK -}}{{- $tolerated = true -}}{{- end -}}
{{- end -}}
{{- if not $tolerated -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $ok -}}{{- $n = add1 $n -}}{{- end -}}
{{- end -}}
{{- $n -}}
{{- end -}}
