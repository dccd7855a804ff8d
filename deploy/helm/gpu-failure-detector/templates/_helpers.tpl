{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "gfd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "gfd.fullname" -}}
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

{{- define "gfd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gfd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gfd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gfd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gfd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gfd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gfd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Paths inside the container (ConfigMap mount, state volume). */}}
{{- define "gfd.configDir" -}}/etc/gpu-failure-detector{{- end }}
{{- define "gfd.stateDir" -}}/var/lib/gpu-failure-detector{{- end }}

{{/*
The daemon config of one mode: the user's `config` (plus fleet.config for the fleet) with the
keys the chart owns laid over it. Argument: dict "root" $ "mode" "agent"|"fleet".
*/}}
{{- define "gfd.config" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $cfg := deepCopy (default dict $v.config) }}
{{- $owned := dict "mode" .mode }}
{{- if eq .mode "agent" }}
{{- $_ := set $owned "kmsg" (dict "enabled" $v.agent.kmsg.enabled "path" "/dev/kmsg") }}
{{- $_ := set $owned "targets" (dict "agent_ports" (dict "dcgm" $v.agent.exporterPorts.dcgm "node" $v.agent.exporterPorts.node) "kubernetes" (dict "enabled" $v.agent.discovery.enabled)) }}
{{- else }}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (default dict $v.fleet.config)) }}
{{- end }}
{{- if $v.state.enabled }}
{{- $_ := set $owned "state" (dict "path" (printf "%s/state" (include "gfd.stateDir" $root))) }}
{{- end }}
{{- if $v.signalRules }}
{{- $_ := set $owned "rules" (dict "signals" (printf "%s/signals.yaml" (include "gfd.configDir" $root))) }}
{{- end }}
{{- if $v.calibration }}
{{- $_ := set $owned "calibration" (dict "path" (printf "%s/calibration.json" (include "gfd.configDir" $root))) }}
{{- end }}
{{- $_ := set $owned "server" (dict "listen" (printf "0.0.0.0:%d" (int $v.server.port))) }}
{{- toYaml (mustMergeOverwrite $cfg $owned) }}
{{- end }}

{{/* Container security context: the values', or privileged root when the agent reads kmsg. */}}
{{- define "gfd.agentSecurityContext" -}}
{{- if .Values.agent.kmsg.enabled }}
privileged: true
runAsNonRoot: false
runAsUser: 0
readOnlyRootFilesystem: true
{{- else }}
{{- toYaml .Values.securityContext }}
{{- end }}
{{- end }}

{{/* The pod spec parts shared by agent and fleet: probes, ports, mounts. */}}
{{- define "gfd.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- end }}
