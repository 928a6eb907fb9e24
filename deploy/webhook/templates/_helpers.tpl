{{/* The chart's name in object names and labels (nameOverride replaces it). */}}
{{- define "vram-preflight-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of every object of the release (63 characters at most, DNS-1123).
The release name when it already says what this is: `helm install
vram-preflight-webhook` gives vram-preflight-webhook, and `helm install
vram-preflight` (the documented name) gives vram-preflight-webhook too, not
vram-preflight-vram-preflight-webhook. Any other release name is prefixed:
gate -> gate-vram-preflight-webhook.
*/}}
{{- define "vram-preflight-webhook.fullname" -}}
{{- $name := include "vram-preflight-webhook.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else if and (not .Values.nameOverride) (contains "vram-preflight" .Release.Name) -}}
{{- printf "%s-webhook" (.Release.Name | trunc 55 | trimSuffix "-") -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vram-preflight-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vram-preflight-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vram-preflight-webhook.labels" -}}
{{ include "vram-preflight-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "vram-preflight-webhook.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vram-preflight-webhook.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository@digest when a digest is given, else repository:tag (tag: the appVersion by default). */}}
{{- define "vram-preflight-webhook.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret that holds the serving certificate (tls.crt, tls.key, ca.crt), whichever mode made it. */}}
{{- define "vram-preflight-webhook.tlsSecretName" -}}
{{- printf "%s-tls" (include "vram-preflight-webhook.fullname" .) -}}
{{- end -}}

{{/* Every DNS name the API server may use for the Service. */}}
{{- define "vram-preflight-webhook.dnsNames" -}}
{{- $svc := include "vram-preflight-webhook.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}
