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

{{/* The user (and group) the webhook runs as: not root, every capability dropped. */}}
{{- define "vram-preflight-webhook.uid" -}}
65532
{{- end -}}

{{/* A Prometheus duration (1h30m, 30s, 500ms; y, w, d, h, m, s, ms) in milliseconds. */}}
{{- define "vram-preflight-webhook.prometheusMs" -}}
{{- $perUnit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 -}}
{{- $number := regexFind "^[0-9]+" . -}}
{{- $ms = add $ms (mul (int64 $number) (get $perUnit (trimPrefix $number .))) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{/* A Go duration (8760h, 1h30m, 1.5h; h, m, s, ms, us, µs, ns), as cert-manager reads it, in seconds. */}}
{{- define "vram-preflight-webhook.goSeconds" -}}
{{- $perUnit := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 -}}
{{- $seconds := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|h|m|s)" (toString .) -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $seconds = addf $seconds (mulf (float64 $number) (get $perUnit (trimPrefix $number .))) -}}
{{- end -}}
{{- $seconds -}}
{{- end -}}

{{/*
Values that each pass values.schema.json but are wrong together, or for this
pod (a JSON Schema cannot compare two values): refused at render, by both
helms, with the reason and the fix, rather than rendered into objects that
fail later where it is harder to see why.
*/}}
{{- define "vram-preflight-webhook.checkValues" -}}
{{- $uid := include "vram-preflight-webhook.uid" . -}}
{{- if lt (int .Values.webhook.port) 1024 -}}
{{- fail (printf "webhook.port %v: the webhook runs as user %s with every capability dropped, and cannot listen on a port below 1024; give it 1024 or above (8443 by default: the API server calls the Service's port, service.port, which may stay 443)" .Values.webhook.port $uid) -}}
{{- end -}}
{{- if and .Values.metrics.port (lt (int .Values.metrics.port) 1024) -}}
{{- fail (printf "metrics.port %v: the webhook runs as user %s with every capability dropped, and cannot listen on a port below 1024; give it 1024 or above (e.g. 9090), or 0 for none" .Values.metrics.port $uid) -}}
{{- end -}}
{{- with .Values.metrics.serviceMonitor -}}
{{- if and .enabled (gt (int64 (include "vram-preflight-webhook.prometheusMs" .scrapeTimeout)) (int64 (include "vram-preflight-webhook.prometheusMs" .interval))) -}}
{{- fail (printf "metrics.serviceMonitor.scrapeTimeout %s is longer than metrics.serviceMonitor.interval %s: Prometheus refuses a scrape whose timeout is greater than its interval; give scrapeTimeout at most the interval (10s with 30s by default)" .scrapeTimeout .interval) -}}
{{- end -}}
{{- end -}}
{{- if .Values.certificates.certManager.enabled -}}
{{- with .Values.certificates.certManager -}}
{{- if ge (float64 (include "vram-preflight-webhook.goSeconds" .renewBefore)) (float64 (include "vram-preflight-webhook.goSeconds" .duration)) -}}
{{- fail (printf "certificates.certManager.renewBefore %s is not shorter than certificates.certManager.duration %s: cert-manager refuses such a Certificate (its duration must be greater than renewBefore); give renewBefore less than the duration (720h with 8760h by default)" .renewBefore .duration) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- with .Values.certificates.generated -}}
{{- if ge (int .renewBeforeDays) (int .validityDays) -}}
{{- fail (printf "certificates.generated.renewBeforeDays %v is not below certificates.generated.validityDays %v: every upgrade would find the certificates due, renew them and rotate the CA (and an upgrade within 10 minutes of that would be refused); give renewBeforeDays less than validityDays (30 with 3650 by default)" .renewBeforeDays .validityDays) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
