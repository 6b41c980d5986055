{{/* The name of every object: <release>-agent unless overridden. */}}
{{- define "sluice.fullname" -}}
{{- $name := printf "%s-agent" .Release.Name -}}
{{- with .Values.fullnameOverride }}{{ $name = . }}{{ end -}}
{{- with .Values.revision }}{{ $name = printf "%s-%s" $name . }}{{ end -}}
{{- $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- with .Values.revision }}
istio.io/rev: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sluice.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if eq .Values.variant "debug" }}{{ $tag = printf "%s-debug" $tag }}{{ end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* Where the host's CNI directories appear inside the container. */}}
{{- define "sluice.cniBinMount" -}}/host/cni/bin{{- end -}}
{{- define "sluice.cniConfMount" -}}/host/cni/net.d{{- end -}}

{{/* The legacy (before 1.30) AppArmor annotation value of appArmorProfile. */}}
{{- define "sluice.appArmorAnnotation" -}}
{{- $p := .Values.appArmorProfile -}}
{{- if eq $p.type "RuntimeDefault" -}}runtime/default
{{- else if eq $p.type "Unconfined" -}}unconfined
{{- else if eq $p.type "Localhost" -}}localhost/{{ $p.localhostProfile }}
{{- else -}}{{ fail (printf "appArmorProfile.type %q: want RuntimeDefault, Unconfined or Localhost" $p.type) }}
{{- end -}}
{{- end -}}
