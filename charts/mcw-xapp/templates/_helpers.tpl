{{/*
Expand the name of the chart. It is also the xApp name: the pod hostname, the name in
config-file.json and the middle of the O-RAN SC service names.
*/}}
{{- define "mcw-xapp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "mcw-xapp.fullname" -}}
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

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "mcw-xapp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespace of every object: .Values.namespace (ricxapp, where O-RAN SC runs xApps) or, when
that is empty, the release namespace.
*/}}
{{- define "mcw-xapp.namespace" -}}
{{- default .Release.Namespace .Values.namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "mcw-xapp.labels" -}}
helm.sh/chart: {{ include "mcw-xapp.chart" . }}
{{ include "mcw-xapp.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "mcw-xapp.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "mcw-xapp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcw-xapp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The `helm test` pod: a name label of its own, so that no selector of the xApp (Deployment,
Services, PodDisruptionBudget, NetworkPolicy) matches it. Under the xApp's NetworkPolicy its
egress would be the xApp's (which does not include the xApp itself) and the
PodDisruptionBudget would count a pod no controller owns.
*/}}
{{- define "mcw-xapp.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mcw-xapp.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcw-xapp.testLabels" -}}
helm.sh/chart: {{ include "mcw-xapp.chart" . }}
{{ include "mcw-xapp.testSelectorLabels" . }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "mcw-xapp.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
O-RAN SC xApp names. The frame registers with the appmgr using the environment variables
Kubernetes derives from these service names (SERVICE_<NS>_<NAME>_HTTP_PORT, ..._RMR_PORT), so
they follow the onboarder's pattern service-<namespace>-<name>-{rmr,http}.
*/}}
{{- define "mcw-xapp.ricName" -}}
{{- printf "%s-%s" (include "mcw-xapp.namespace" .) (include "mcw-xapp.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.rmrServiceName" -}}
{{- printf "service-%s-rmr" (include "mcw-xapp.ricName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.httpServiceName" -}}
{{- printf "service-%s-http" (include "mcw-xapp.ricName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.appconfigName" -}}
{{- printf "configmap-%s-appconfig" (include "mcw-xapp.ricName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.appenvName" -}}
{{- printf "configmap-%s-appenv" (include "mcw-xapp.ricName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.routesName" -}}
{{- printf "configmap-%s-routes" (include "mcw-xapp.ricName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
RMR_SRC_ID: the RMR service's name qualified by its namespace, as the O-RAN SC charts set it;
with clusterDomain set, the full service FQDN.
*/}}
{{- define "mcw-xapp.rmrSrcId" -}}
{{- $host := printf "%s.%s" (include "mcw-xapp.rmrServiceName" .) (include "mcw-xapp.namespace" .) }}
{{- if .Values.clusterDomain }}
{{- printf "%s.svc.%s" $host .Values.clusterDomain }}
{{- else }}
{{- $host }}
{{- end }}
{{- end }}

{{/*
The xApp image reference: registry/repository, then @digest or :tag (default appVersion).
*/}}
{{- define "mcw-xapp.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "mcw-xapp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcw-xapp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Secrets: an existing one named in values, or the one the chart creates from inline values.
*/}}
{{- define "mcw-xapp.mqttTlsSecret" -}}
{{- default (printf "%s-mqtt-tls" (include "mcw-xapp.fullname" .)) .Values.broker.clientTls.existingSecret }}
{{- end }}

{{- define "mcw-xapp.influxdbSecret" -}}
{{- default (printf "%s-influxdb" (include "mcw-xapp.fullname" .)) .Values.influxdb.auth.existingSecret }}
{{- end }}

{{/*
The Mosquitto deployed beside the xApp (broker.deploy).
*/}}
{{- define "mcw-xapp.brokerName" -}}
{{- printf "%s-broker" (include "mcw-xapp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcw-xapp.brokerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mcw-xapp.name" . }}-broker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcw-xapp.brokerLabels" -}}
helm.sh/chart: {{ include "mcw-xapp.chart" . }}
{{ include "mcw-xapp.brokerSelectorLabels" . }}
app.kubernetes.io/component: mqtt-broker
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "mcw-xapp.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Host the xApp connects to: the deployed broker's service, or broker.host.
*/}}
{{- define "mcw-xapp.brokerHost" -}}
{{- if .Values.broker.deploy }}
{{- include "mcw-xapp.brokerName" . }}
{{- else }}
{{- required "broker.host is required when broker.deploy is false" .Values.broker.host }}
{{- end }}
{{- end }}

{{- define "mcw-xapp.brokerImage" -}}
{{- $img := .Values.broker.server.image }}
{{- $repo := $img.repository }}
{{- if $img.registry }}
{{- $repo = printf "%s/%s" $img.registry $img.repository }}
{{- end }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo $img.tag }}
{{- end }}
{{- end }}

{{/*
The descriptor the pod reads as $CONFIG_FILE: config-file.json with .Values.controls merged
over its controls section, and APP_NAMESPACE, which the frame's appmgr registration reads from
this file to find its SERVICE_<NS>_<NAME>_*_PORT variables (it assumes ricxapp without it).
*/}}
{{- define "mcw-xapp.configFile" -}}
{{- $desc := .Files.Get "files/config-file.json" | fromJson }}
{{- $controls := mergeOverwrite (deepCopy (get $desc "controls")) (deepCopy .Values.controls) }}
{{- $_ := set $desc "controls" $controls }}
{{- $_ = set $desc "APP_NAMESPACE" (include "mcw-xapp.namespace" .) }}
{{- toPrettyJson $desc }}
{{- end }}

{{/*
The port the deployed broker listens on: the first `listener` line of broker/mosquitto.conf.
*/}}
{{- define "mcw-xapp.brokerListenerPort" -}}
{{- $line := regexFind "(?m)^listener\\s+[0-9]+" (.Files.Get "files/mosquitto.conf") }}
{{- required "files/mosquitto.conf has no listener line" (regexFind "[0-9]+$" $line) }}
{{- end }}

{{/*
The model-signing public key (model.signingPublicKey): the Secret holding it, empty when none is
given (the xApp then uses the key bundled in the image).
*/}}
{{- define "mcw-xapp.modelKeySecret" -}}
{{- $k := .Values.model.signingPublicKey }}
{{- if and $k.existingSecret $k.pem }}
{{- fail "model.signingPublicKey: set existingSecret or pem, not both" }}
{{- end }}
{{- if $k.existingSecret }}
{{- $k.existingSecret }}
{{- else if $k.pem }}
{{- printf "%s-model-signing" (include "mcw-xapp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Where the xApp reads the model-signing public key: controls.model.public_key_file of the
descriptor with .Values.controls merged over it, /opt/mcw/keys/model-signing.pub when unset.
Its directory is mounted whole (over the image's bundled key; no subPath, which would not follow
a changed Secret): it must be one of its own, not a directory the image or other mounts use.
*/}}
{{- define "mcw-xapp.modelKeyFile" -}}
{{- $desc := .Files.Get "files/config-file.json" | fromJson }}
{{- $model := deepCopy (get (get $desc "controls") "model" | default dict) }}
{{- $model = mergeOverwrite $model (deepCopy (.Values.controls.model | default dict)) }}
{{- $path := get $model "public_key_file" | default "/opt/mcw/keys/model-signing.pub" }}
{{- $dir := dir $path }}
{{- if not (isAbs $path) }}
{{- fail (printf "controls.model.public_key_file must be an absolute path, not %q" $path) }}
{{- end }}
{{- $taken := list "/" "/tmp" "/opt" "/opt/ric" "/opt/ric/config" "/opt/ric/tls" "/opt/ric/secret" "/opt/ric/secret/influxdb" "/opt/mcw" "/opt/mcw/models" "/opt/mcw/schemas" "/opt/venv" }}
{{- if or (has $dir $taken) (hasPrefix "/usr" $dir) (hasPrefix "/etc" $dir) (hasPrefix "/opt/venv/" $dir) }}
{{- fail (printf "controls.model.public_key_file: its directory %s would be hidden by the key's mount; put the key in a directory of its own (default /opt/mcw/keys)" $dir) }}
{{- end }}
{{- $path }}
{{- end }}

{{/*
Sharding on: set explicitly, or (null) exactly when more than one replica runs. Two pods
without leases would both publish every CPE's weights: refused (also by values.schema.json).
*/}}
{{- define "mcw-xapp.sharding" -}}
{{- $on := .Values.sharding.enabled -}}
{{- if kindIs "invalid" $on -}}
{{- $on = gt (int .Values.replicaCount) 1 -}}
{{- end -}}
{{- if and (not $on) (gt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount > 1 needs sharding.enabled (or null): two pods without leases would both publish every CPE" -}}
{{- end -}}
{{- ternary "true" "false" $on -}}
{{- end }}

{{/*
Deployment strategy: as set, or Recreate for one unsharded pod and RollingUpdate with sharding.
*/}}
{{- define "mcw-xapp.updateStrategy" -}}
{{- if .Values.updateStrategy.type -}}
{{- .Values.updateStrategy.type -}}
{{- else if eq (include "mcw-xapp.sharding" .) "true" -}}
RollingUpdate
{{- else -}}
Recreate
{{- end -}}
{{- end }}

{{/*
A CPE's shard: FNV-1a (32 bit) of its id's bytes modulo the shard count, the function of
xapp/core/shards.py, kernel-agent/mqttclient and broker/make-acl.sh (tests/packaging/test_chart.py
checks the chart against make-acl.sh). Argument: dict "id" (ASCII, as the values schema requires)
and "shards". Templates have no XOR: the low byte of the hash is XORed with the character bit by
bit.
*/}}
{{- define "mcw-xapp.shardOf" -}}
{{- $h := 2166136261 -}}
{{- $id := .id -}}
{{- range $i := until (len $id) -}}
{{- $c := index $id $i -}}
{{- $lo := mod $h 256 -}}
{{- $x := 0 -}}
{{- range $bit := list 1 2 4 8 16 32 64 128 -}}
{{- if ne (mod (div $lo $bit) 2) (mod (div $c $bit) 2) -}}
{{- $x = add $x $bit -}}
{{- end -}}
{{- end -}}
{{- $h = mod (mul (add (sub $h $lo) $x) 16777619) 4294967296 -}}
{{- end -}}
{{- mod $h (int .shards) -}}
{{- end -}}
