{{/*
Names, labels and shared rules. The app.kubernetes.io/name label is always
"pulumi-stack-operator": the alerts and dashboards in manifests/ select on it.
*/}}

{{/* The name of every object: the release name if it contains the chart's, else both. */}}
{{- define "pso.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pso.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels selecting this release's operator pods (plus a component label per object). */}}
{{- define "pso.selectorLabels" -}}
app.kubernetes.io/name: pulumi-stack-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every templated object. */}}
{{- define "pso.labels" -}}
{{ include "pso.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: pulumi-stack-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "pso.chart" . }}
{{- end -}}

{{- define "pso.serviceAccountName" -}}
{{- default (include "pso.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "pso.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
What reconciling Stacks takes (manifests/rbac/role.yaml), as a ClusterRole or a Role per
watched namespace. No create/delete of Stacks, no list/watch of Secrets.
*/}}
{{- define "pso.stackRules" -}}
- apiGroups: [pulumi.com]
  resources: [stacks]
  # list/watch: the informer; get: the status writer re-reads after a conflict;
  # patch: the finalizer.
  verbs: [get, list, watch, patch]
- apiGroups: [pulumi.com]
  resources: [stacks/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  # configRef: the ConfigMaps a Stack names, one at a time when a run needs them.
  verbs: [get]
- apiGroups: [pulumi.com]
  resources: [programs]
  # programRef: the informer of Programs (a change runs the Stacks that reference it).
  verbs: [get, list, watch]
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [gitrepositories, ocirepositories, buckets]
  # fluxSource: an informer per source kind the cluster serves (a new artifact runs the
  # Stacks that reference the source).
  verbs: [get, list, watch]
# The pod runner: run pods read and watched by name, created and deleted; their log followed.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, watch, create, delete, patch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- if include "pso.keepWarm" . }}
# --run-pod-keep-warm: a run handed to a waiting run pod (agent take, through an exec; a
# websocket exec is checked as get, newer API servers also check create).
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [get, create]
{{- end }}
# The pod runner: whether a Stack's namespace has the cache claim its run pods mount.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# The pod runner: whether a Stack's ServiceAccount is one Stacks may run as (its label).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  # patch raises the count of a repeated Event.
  verbs: [create, patch]
{{- end -}}

{{/* Combinations of values that render but cannot work. */}}
{{- define "pso.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: without a Lease every replica would reconcile every Stack" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.metrics.secure) -}}
{{- fail "networkPolicy.enabled needs metrics.secure: the policy admits the scrapers' namespaces, the token check admits the scrapers" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes that Service" -}}
{{- end -}}
{{- end -}}

{{/* The operator's PriorityClass: the chart's own, or one that exists. */}}
{{- define "pso.priorityClassName" -}}
{{- default (include "pso.fullname" .) .Values.priorityClass.name -}}
{{- end -}}

{{/* The metrics port: 8443 over HTTPS (metrics.secure), else 8080. */}}
{{- define "pso.metricsPort" -}}
{{- if .Values.metrics.secure }}8443{{ else }}8080{{ end -}}
{{- end -}}

{{/*
"true" when run pods are kept warm (runPodKeepWarm set and not zero), else "".
*/}}
{{- define "pso.keepWarm" -}}
{{- $window := toString .Values.runPodKeepWarm -}}
{{- if not (has $window (list "" "0" "0s" "0m" "0h" "0.0")) -}}true{{- end -}}
{{- end }}
