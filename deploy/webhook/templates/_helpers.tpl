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

{{/*
Node's heap cap, MiB: webhook.heapMiB, else 3/8 of resources.limits.memory
(a Kubernetes quantity: plain bytes, or with a decimal k/M/G/T or binary
Ki/Mi/Gi/Ti suffix); empty without either (Node's own default). A limit that
leaves less than 64 MiB of heap fails the render.
*/}}
{{- define "vram-preflight-webhook.heapMiB" -}}
{{- include "vram-preflight-webhook.heapMiBOf" (dict "heapMiB" .Values.webhook.heapMiB "resources" .Values.resources "who" "the webhook" "heapValue" "webhook.heapMiB" "limitValue" "resources.limits.memory") -}}
{{- end -}}

{{/*
The same rule for any container (the audit's CronJob too): a dict of heapMiB
(the value that sets it), resources (its requests and limits), who (for the
message), heapValue and limitValue (the values' names, for the message).
*/}}
{{- define "vram-preflight-webhook.heapMiBOf" -}}
{{- if .heapMiB -}}
{{- .heapMiB -}}
{{- else -}}
{{- $limit := toString (dig "limits" "memory" "" (.resources | default dict)) -}}
{{- if $limit -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $limit -}}
{{- $unit := trimPrefix $number $limit -}}
{{- /* MiB per unit of each suffix */ -}}
{{- $perMiB := dict "" 0.00000095367431640625 "k" 0.00095367431640625 "Ki" 0.0009765625 "M" 0.95367431640625 "Mi" 1.0 "G" 953.67431640625 "Gi" 1024.0 "T" 953674.31640625 "Ti" 1048576.0 -}}
{{- if not (hasKey $perMiB $unit) -}}
{{- fail (printf "%s %q: write it as a quantity with a k, M, G, T, Ki, Mi, Gi or Ti suffix, or set %s" .limitValue $limit .heapValue) -}}
{{- end -}}
{{- $heap := floor (divf (mulf (float64 $number) (get $perMiB $unit) 3.0) 8.0) | int -}}
{{- if lt $heap 64 -}}
{{- fail (printf "%s %q leaves %s %d MiB of heap (3/8 of it); give it at least 192Mi, or set %s" .limitValue $limit .who $heap .heapValue) -}}
{{- end -}}
{{- $heap -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pod's grace period: terminationGracePeriodSeconds, else the shutdown delay, the drain and 5 s; never one the webhook cannot finish within. */}}
{{- define "vram-preflight-webhook.gracePeriod" -}}
{{- $needed := add .Values.webhook.shutdownDelaySeconds .Values.webhook.drainTimeoutSeconds -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $needed 5 -}}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds %v must be above webhook.shutdownDelaySeconds + webhook.drainTimeoutSeconds (%v): the kubelet would kill the webhook with admissions in flight" .Values.terminationGracePeriodSeconds $needed) -}}
{{- else -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}
