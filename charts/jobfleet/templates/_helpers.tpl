{{- define "jobfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "jobfleet.labels" -}}
app.kubernetes.io/name: jobfleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "jobfleet.selectorLabels" -}}
app.kubernetes.io/name: jobfleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "jobfleet.serviceAccountName" -}}
{{- default (include "jobfleet.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
The rules the operator needs in each namespace it watches: exactly the calls
it makes (test/integration/chart.test.ts compares them with a recorded run).
*/}}
{{- define "jobfleet.rules" -}}
- apiGroups: [jobfleet.dev]
  resources: [jobworkers, jobreplays]
  verbs: [get, list, watch]
- apiGroups: [jobfleet.dev]
  resources: [jobworkers/status, jobreplays/status]
  verbs: [patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [controllerrevisions]
  # get: one of a revision's name that is not labelled as ours, found on create
  verbs: [get, list, watch, create, delete]
- apiGroups: ['']
  resources: [services]
  verbs: [list, watch, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, patch]
- apiGroups: ['']
  resources: [secrets]
  verbs: [get]
- apiGroups: ['']
  resources: [pods]
  # patch: the pod-deletion-cost of the idlest pods, before a scale-down
  verbs: [list, watch, patch]
- apiGroups: ['']
  resources: [events]
  verbs: [create]
{{- end -}}
