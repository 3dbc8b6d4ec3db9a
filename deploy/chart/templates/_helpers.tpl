{{/* The chart's name, at most 63 characters (a label value). */}}
{{- define "nodeplan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: fullnameOverride, else the release name when it already contains the chart's name, else
release-chart; at most 63 characters. */}}
{{- define "nodeplan.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* What selects the controller's pods (Deployment, Service, PDB, affinity defaults). */}}
{{- define "nodeplan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodeplan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "nodeplan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nodeplan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "nodeplan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nodeplan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag[@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "nodeplan.image" -}}
{{- $image := .Values.controller.image }}
{{- $ref := printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- if $image.digest }}{{ printf "%s@%s" $ref $image.digest }}{{ else }}{{ $ref }}{{ end }}
{{- end }}

{{/* Give every podAntiAffinity / podAffinity term and every topology spread constraint without a labelSelector
the chart's selector labels, in place (values are maps shared with the template that renders them). */}}
{{- define "nodeplan.defaultSelectors" -}}
{{- $selector := dict "matchLabels" (include "nodeplan.selectorLabels" . | fromYaml) }}
{{- $affinity := .Values.affinity | default dict }}
{{- range $kind := list "podAntiAffinity" "podAffinity" }}
{{- $spec := get $affinity $kind | default dict }}
{{- range $term := get $spec "requiredDuringSchedulingIgnoredDuringExecution" | default list }}
{{- if not (hasKey $term "labelSelector") }}{{ $_ := set $term "labelSelector" $selector }}{{ end }}
{{- end }}
{{- range $weighted := get $spec "preferredDuringSchedulingIgnoredDuringExecution" | default list }}
{{- $term := get $weighted "podAffinityTerm" | default dict }}
{{- if not (hasKey $term "labelSelector") }}{{ $_ := set $term "labelSelector" $selector }}{{ end }}
{{- end }}
{{- end }}
{{- range $constraint := .Values.topologySpreadConstraints | default list }}
{{- if not (hasKey $constraint "labelSelector") }}{{ $_ := set $constraint "labelSelector" $selector }}{{ end }}
{{- end }}
{{- end }}
