{{/*
Names. Kept to 52 characters: the StatefulSet's controller-revision-hash label is the StatefulSet
name plus an 11-character hash, and labels stop at 63.
*/}}
{{- define "leapcache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "leapcache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service: the StatefulSet's serviceName, giving pods stable DNS names. */}}
{{- define "leapcache.headlessName" -}}
{{- printf "%s-headless" (include "leapcache.fullname" .) -}}
{{- end -}}

{{- define "leapcache.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "leapcache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leapcache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "leapcache.labels" -}}
helm.sh/chart: {{ include "leapcache.chart" . }}
{{ include "leapcache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: state-cache
app.kubernetes.io/part-of: leapcache
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "leapcache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "leapcache.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "leapcache.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Where the rendered server config is mounted, and its file name. */}}
{{- define "leapcache.configDir" -}}/etc/leapcache{{- end -}}
{{- define "leapcache.configFile" -}}leapcache.yaml{{- end -}}

{{/*
leapcache.scalar: a value as the server reads it. Helm reads every number in values as a float64,
which prints 1000000 as 1e+06; whole numbers print as integers here.
*/}}
{{- define "leapcache.scalar" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
leapcache.bytes: a size in the server's syntax ("8Gi", "512MiB", "10GB", "1048576" or a number) as
an integer count of bytes, for the memory arithmetic below. values.schema.json admits only these
forms; anything else fails here too.
*/}}
{{- define "leapcache.bytes" -}}
{{- $s := include "leapcache.scalar" . -}}
{{- if not (regexMatch "^(0|[1-9][0-9]*)(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|Ki|Mi|Gi|Ti)?$" $s) -}}
{{- fail (printf "cannot read %q as a byte size: write digits with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti)" $s) -}}
{{- end -}}
{{- $digits := regexFind "^[0-9]+" $s -}}
{{- $unit := trimPrefix $digits $s -}}
{{- $factors := dict "" 1 "B" 1 "KB" 1000 "MB" 1000000 "GB" 1000000000 "TB" 1000000000000 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- mul (int64 $digits) (get $factors $unit) -}}
{{- end -}}

{{/*
leapcache.quantityBytes: a Kubernetes memory quantity ("16Gi", "20G", "1.5Gi", 17179869184) in
bytes, as a float (quantities may be fractional).
*/}}
{{- define "leapcache.quantityBytes" -}}
{{- $s := include "leapcache.scalar" . -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$" $s) -}}
{{- fail (printf "cannot read memory quantity %q: write a number with an optional k, M, G, T, P, Ki, Mi, Gi, Ti or Pi suffix" $s) -}}
{{- end -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $s -}}
{{- $unit := trimPrefix $number $s -}}
{{- $factors := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 $number) (get $factors $unit) -}}
{{- end -}}

{{/* Bytes of the tiers that live in host memory and so count toward the pod's memory. */}}
{{- define "leapcache.hostTierBytes" -}}
{{- $spill := int64 (include "leapcache.bytes" .Values.tiers.spill.budget) -}}
{{- if .Values.tiers.primary.onHost -}}
{{- add (int64 (include "leapcache.bytes" .Values.tiers.primary.budget)) $spill -}}
{{- else -}}
{{- $spill -}}
{{- end -}}
{{- end -}}

{{/*
leapcache.memoryOverheadBytes: tiers.memoryOverhead in bytes; "auto" is the server's memory bound
(ServerMemoryBound, service/config/config.h) less the host tiers: decode_memory_budget unless
compute_backend is cuda, grpc_memory_budget, two max_message_bytes per core (tiers.overheadCores:
gRPC's threads follow the node's cores, not the pod's request), 128 MiB of heap the allocator
keeps and 64 MiB for the process, with the server's defaults for settings not under config.
*/}}
{{- define "leapcache.memoryOverheadBytes" -}}
{{- if eq (toString .Values.tiers.memoryOverhead) "auto" -}}
{{- $c := default (dict) .Values.config -}}
{{- $grpc := int64 (include "leapcache.bytes" (default "256MiB" (get $c "grpc_memory_budget"))) -}}
{{- $message := int64 (include "leapcache.bytes" (default "8MiB" (get $c "max_message_bytes"))) -}}
{{- $decode := int64 0 -}}
{{- if ne (toString (default "auto" (get $c "compute_backend"))) "cuda" -}}
{{- $decode = int64 (include "leapcache.bytes" (default "1GiB" (get $c "decode_memory_budget"))) -}}
{{- end -}}
{{- $copies := mul 2 $message (int64 .Values.tiers.overheadCores) -}}
{{- add $decode $grpc $copies 134217728 67108864 -}}
{{- else -}}
{{- include "leapcache.bytes" .Values.tiers.memoryOverhead -}}
{{- end -}}
{{- end -}}

{{/*
leapcache.resources: the container's resources. Memory defaults to the host tiers plus
tiers.memoryOverhead, as request and limit; a given memory limit (or request, without a limit) must
hold the host tiers. The GPU request comes from gpu.*.
*/}}
{{- define "leapcache.resources" -}}
{{- $requests := deepCopy (default (dict) .Values.resources.requests) -}}
{{- $limits := deepCopy (default (dict) .Values.resources.limits) -}}
{{- $tiers := int64 (include "leapcache.hostTierBytes" .) -}}
{{- if or (hasKey $limits "memory") (hasKey $requests "memory") -}}
{{- $given := ternary (get $limits "memory") (get $requests "memory") (hasKey $limits "memory") -}}
{{- $givenBytes := float64 (include "leapcache.quantityBytes" $given) -}}
{{- if lt $givenBytes (float64 $tiers) -}}
{{- fail (printf "resources: memory %v is below the host memory tiers (%d bytes: tiers.spill.budget%s); the pod would be OOM-killed as the cache fills. Raise the memory or lower the budgets." $given $tiers (ternary " + tiers.primary.budget" "" .Values.tiers.primary.onHost)) -}}
{{- end -}}
{{- else -}}
{{- $needed := add $tiers (int64 (include "leapcache.memoryOverheadBytes" .)) -}}
{{- $mebibytes := div (add $needed 1048575) 1048576 -}}
{{- $_ := set $requests "memory" (printf "%dMi" $mebibytes) -}}
{{- $_ := set $limits "memory" (printf "%dMi" $mebibytes) -}}
{{- end -}}
{{- if .Values.gpu.enabled -}}
{{- $_ := set $limits .Values.gpu.resourceName (int64 .Values.gpu.count) -}}
{{- end -}}
{{- $out := dict -}}
{{- if $requests -}}{{- $_ := set $out "requests" $requests -}}{{- end -}}
{{- if $limits -}}{{- $_ := set $out "limits" $limits -}}{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
leapcache.serverConfig: the server's YAML config file (a flat map of setting: value, the keys of
service/server/config.h). Values are quoted strings: the server parses every setting from its text.
*/}}
{{- define "leapcache.serverConfig" -}}
# leapcache-server settings (service/server/config.h), rendered by the {{ .Chart.Name }} chart.
# Settings not listed keep the server's defaults.
listen: {{ printf "%s:%d" .Values.listenAddress (int .Values.ports.grpc) | quote }}
metrics_listen: {{ printf "%s:%d" .Values.listenAddress (int .Values.ports.metrics) | quote }}
memory_budget: {{ include "leapcache.scalar" .Values.tiers.primary.budget | quote }}
spill_budget: {{ include "leapcache.scalar" .Values.tiers.spill.budget | quote }}
page_bytes: {{ include "leapcache.scalar" .Values.tiers.pageBytes | quote }}
{{- if hasKey .Values.tiers.spill "promoteOnHit" }}
promote_on_hit: {{ .Values.tiers.spill.promoteOnHit | toString | quote }}
{{- end }}
eviction_policy: {{ .Values.eviction.policy | quote }}
{{- if hasKey .Values.eviction "halfLife" }}
eviction_half_life: {{ include "leapcache.scalar" .Values.eviction.halfLife | quote }}
{{- end }}
shutdown_grace: {{ printf "%ds" (int .Values.lifecycle.shutdownGraceSeconds) | quote }}
{{- if .Values.tls.enabled }}
tls_cert_file: {{ printf "%s/tls.crt" (trimSuffix "/" .Values.tls.mountPath) | quote }}
tls_key_file: {{ printf "%s/tls.key" (trimSuffix "/" .Values.tls.mountPath) | quote }}
{{- if .Values.tls.clientAuth }}
tls_client_ca_file: {{ printf "%s/ca.crt" (trimSuffix "/" .Values.tls.mountPath) | quote }}
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
tokens_file: {{ printf "%s/%s" (trimSuffix "/" .Values.auth.mountPath) .Values.auth.key | quote }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{ $key }}: {{ include "leapcache.scalar" $value | quote }}
{{- end }}
{{- end -}}

{{/* Checks across values that the schema cannot express; included by the StatefulSet. */}}
{{- define "leapcache.validate" -}}
{{- $l := .Values.lifecycle -}}
{{- if le (int $l.terminationGracePeriodSeconds) (add $l.preStopSleepSeconds $l.shutdownGraceSeconds | int) -}}
{{- fail (printf "lifecycle.terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + shutdownGraceSeconds (%d + %d): the kubelet would kill the server before its drain ends" (int $l.terminationGracePeriodSeconds) (int $l.preStopSleepSeconds) (int $l.shutdownGraceSeconds)) -}}
{{- end -}}
{{- if eq (int .Values.ports.grpc) (int .Values.ports.metrics) -}}
{{- fail "ports.grpc and ports.metrics must differ" -}}
{{- end -}}
{{- if eq (int .Values.service.grpcPort) (int .Values.service.metricsPort) -}}
{{- fail "service.grpcPort and service.metricsPort must differ" -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- $_ := required "tls.secretName is required when tls.enabled is true" .Values.tls.secretName -}}
{{- end -}}
{{- if .Values.auth.enabled -}}
{{- $_ := required "auth.secretName is required when auth.enabled is true" .Values.auth.secretName -}}
{{- if not .Values.tls.enabled -}}
{{- fail "auth.enabled needs tls.enabled: bearer tokens must not cross the pod network in the clear" -}}
{{- end -}}
{{- if eq (trimSuffix "/" .Values.auth.mountPath) (trimSuffix "/" .Values.tls.mountPath) -}}
{{- fail "auth.mountPath and tls.mountPath must differ" -}}
{{- end -}}
{{- end -}}
{{- $pageBytes := int64 (include "leapcache.bytes" .Values.tiers.pageBytes) -}}
{{- if lt (int64 (include "leapcache.bytes" .Values.tiers.primary.budget)) $pageBytes -}}
{{- fail "tiers.primary.budget must hold at least one page (tiers.pageBytes)" -}}
{{- end -}}
{{- end -}}
