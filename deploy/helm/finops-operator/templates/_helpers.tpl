{{/* Chart name, truncated to the DNS label limit. */}}
{{- define "finops-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name: the release name when it already contains the chart name, else
<release>-<chart>. Object names are built from it, as in the reference chart.
*/}}
{{- define "finops-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "finops-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "finops-operator.labels" -}}
helm.sh/chart: {{ include "finops-operator.chart" . }}
app.kubernetes.io/name: {{ include "finops-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector of the manager pods; the metrics Service and ServiceMonitors select on it. */}}
{{- define "finops-operator.managerSelectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/name: {{ include "finops-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "finops-operator.managerServiceAccount" -}}
{{- printf "%s-controller-manager" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The job pods' identity, <release>-job; the manager reads it from JOB_SERVICE_ACCOUNT. */}}
{{- define "finops-operator.jobServiceAccount" -}}
{{- printf "%s-job" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Namespaces that get the job ServiceAccount, as a JSON list: the release namespace and every
name in costJobAllowedNamespaces but "*". A pod can only run as a ServiceAccount of its own
namespace, and generated CronJobs live in their CostJob's namespace.
*/}}
{{- define "finops-operator.jobNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range splitList "," (.Values.controllerManager.manager.env.costJobAllowedNamespaces | default "" | toString) -}}
{{- $ns := trim . -}}
{{- if and $ns (ne $ns "*") (not (has $ns $namespaces)) -}}
{{- $namespaces = append $namespaces $ns -}}
{{- end -}}
{{- end -}}
{{- toJson $namespaces -}}
{{- end -}}

{{- define "finops-operator.image" -}}
{{- $img := .Values.controllerManager.manager.image -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}

{{- define "finops-operator.webhookService" -}}
{{- printf "%s-webhook-service" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "finops-operator.metricsService" -}}
{{- printf "%s-controller-manager-metrics-service" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Where the metrics Certificate's Secret is mounted; --metrics-cert-path points here. */}}
{{- define "finops-operator.metricsCertPath" -}}
/tmp/k8s-metrics-server/metrics-certs
{{- end -}}

{{/* The manager's args, plus --metrics-cert-path when cert-manager issues the metrics cert. */}}
{{- define "finops-operator.managerArgs" -}}
{{- $args := .Values.controllerManager.manager.args | default list -}}
{{- if .Values.certManager.enabled -}}
{{- $given := false -}}
{{- range $args -}}
{{- if hasPrefix "--metrics-cert-path" (toString .) -}}
{{- $given = true -}}
{{- end -}}
{{- end -}}
{{- if not $given -}}
{{- $args = append $args (printf "--metrics-cert-path=%s" (include "finops-operator.metricsCertPath" .)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}

{{/*
The port the manager serves /healthz and /readyz on: the one in the args'
--health-probe-bind-address=[HOST]:PORT, else the flag's default 8081. Probes and the
container port follow it, so changing the args cannot leave the probes knocking elsewhere.
*/}}
{{- define "finops-operator.probePort" -}}
{{- $port := "8081" -}}
{{- range .Values.controllerManager.manager.args | default list -}}
{{- $arg := regexReplaceAll "^-+" (toString .) "-" -}}
{{- if hasPrefix "-health-probe-bind-address=" $arg -}}
{{- $addr := $arg | trimPrefix "-health-probe-bind-address=" -}}
{{- if or (eq $addr "0") (eq $addr "") -}}
{{- fail "controllerManager.manager.args turn the health probe server off (--health-probe-bind-address=0), but the manager's liveness and readiness probes need it" -}}
{{- end -}}
{{- if regexMatch "^(127\\.|localhost:|\\[::1\\]:)" $addr -}}
{{- fail (printf "controllerManager.manager.args bind the health probes to %s, which the kubelet cannot reach: use :PORT" $addr) -}}
{{- end -}}
{{- $port = regexReplaceAll "^.*:" $addr "" -}}
{{- end -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{- define "finops-operator.servingCert" -}}
{{- printf "%s-serving-cert" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fail early on the one combination that cannot work. */}}
{{- define "finops-operator.validate" -}}
{{- if and .Values.certManager.enabled .Values.openshift.enabled -}}
{{- fail "certManager.enabled and openshift.enabled are alternatives: enable one of them" -}}
{{- end -}}
{{- with .Values.mdoDependencies -}}
{{- if .enabled -}}
{{- $ocNamespace := $.Values.controllerManager.manager.env.opencostDeploymentNamespace -}}
{{- if ne $ocNamespace $.Release.Namespace -}}
{{- fail (printf "mdoDependencies.enabled installs OpenCost in the release namespace %q, but controllerManager.manager.env.opencostDeploymentNamespace is %q: set it to %q" $.Release.Namespace $ocNamespace $.Release.Namespace) -}}
{{- end -}}
{{- if or (not .postgres.database) (not .postgres.username) -}}
{{- fail "mdoDependencies.postgres.database and mdoDependencies.postgres.username must not be empty" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A starter CostJob. Arguments: (dict "root" $ "job" <values> "name" <suffix> "type" <type>
"key" <values key, for messages>).
Empty timeouts are omitted; k8sOperationTimeout is the reference chart's key for
kubernetesOperationTimeout and is rendered under the CRD's field name. `resources` (when not
empty) becomes spec.resources, which replaces the loader container's whole resources block;
`sharding` (when not empty, ResourceCostCollection only) becomes spec.sharding.
*/}}
{{- define "finops-operator.costJob" -}}
{{- $job := .job -}}
apiVersion: finops.stakater.com/v1alpha1
kind: CostJob
metadata:
  name: {{ printf "%s-%s" .root.Release.Name .name | trunc 63 | trimSuffix "-" }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "finops-operator.labels" .root | nindent 4 }}
spec:
  type: {{ .type }}
  interval: {{ $job.interval | quote }}
  {{- $k8s := coalesce $job.kubernetesOperationTimeout $job.k8sOperationTimeout }}
  {{- range $key := list "databaseInitTimeout" "openCostFetchTimeout" "databaseInsertTimeout" "databaseViewsRefreshTimeout" "statusUpdateTimeout" "httpClientTimeout" }}
  {{- with index $job $key }}
  {{ $key }}: {{ . | quote }}
  {{- end }}
  {{- end }}
  {{- with $k8s }}
  kubernetesOperationTimeout: {{ . | quote }}
  {{- end }}
  {{- with $job.resources }}
  {{- if not (kindIs "map" .) }}
  {{- fail (printf "%s.resources must be a map of requests and limits" $.key) }}
  {{- end }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $job.sharding }}
  {{- if ne $.type "ResourceCostCollection" }}
  {{- fail (printf "%s.sharding does nothing: only ResourceCostCollection runs shard their OpenCost queries" $.key) }}
  {{- end }}
  {{- include "finops-operator.sharding" (dict "sharding" . "key" (printf "%s.sharding" $.key)) | nindent 2 }}
  {{- end }}
{{- end -}}

{{/*
spec.sharding of a starter CostJob: only namespacesPerShard and concurrency, each a whole
number of at least 1 (an unknown key would be pruned by the API server without a word).
Arguments: (dict "sharding" <values> "key" <values key, for messages>).
*/}}
{{- define "finops-operator.sharding" -}}
{{- if not (kindIs "map" .sharding) -}}
{{- fail (printf "%s must be a map with namespacesPerShard and/or concurrency" .key) -}}
{{- end -}}
sharding:
{{- range $name, $value := .sharding }}
{{- if not (has $name (list "namespacesPerShard" "concurrency")) }}
{{- fail (printf "%s.%s is not a sharding setting (namespacesPerShard, concurrency)" $.key $name) }}
{{- end }}
{{- $text := toString $value }}
{{- /* Numbers from a values file arrive as floats: 100000000 would print as 1e+08. */}}
{{- if and (kindIs "float64" $value) (eq (floor $value) $value) }}
{{- $text = printf "%.0f" $value }}
{{- end }}
{{- if or (not (regexMatch "^[0-9]+$" $text)) (lt ($text | atoi) 1) }}
{{- fail (printf "%s.%s must be a whole number of at least 1, got %s" $.key $name $text) }}
{{- end }}
  {{ $name }}: {{ $text | atoi }}
{{- end }}
{{- end -}}

{{/* Bundled dependencies (mdoDependencies): object names and in-cluster addresses. */}}
{{- define "finops-operator.postgresName" -}}
{{- printf "%s-postgres" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "finops-operator.postgresCredentials" -}}
{{- printf "%s-postgres-credentials" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "finops-operator.prometheusName" -}}
{{- printf "%s-prometheus" (include "finops-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* OpenCost's Deployment and Service: the Deployment the manager restarts. */}}
{{- define "finops-operator.opencostName" -}}
{{- .Values.controllerManager.manager.env.opencostDeploymentName -}}
{{- end -}}

{{/* <service>.<namespace>.svc.<cluster domain>. Argument: (list $ "<service>"). */}}
{{- define "finops-operator.serviceHost" -}}
{{- $root := index . 0 -}}
{{- printf "%s.%s.svc.%s" (index . 1) $root.Release.Namespace $root.Values.kubernetesClusterDomain -}}
{{- end -}}

{{/*
Selector of one bundled dependency's pods. Argument: (list $ "<component>"). No
control-plane label, so the manager's selector never matches them.
*/}}
{{- define "finops-operator.dependencySelector" -}}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Labels of one bundled dependency's objects. Argument: (list $ "<component>"). */}}
{{- define "finops-operator.dependencyLabels" -}}
{{ include "finops-operator.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Percent-encode one part of a connection URI (urlquery writes a space as "+"). */}}
{{- define "finops-operator.uriEscape" -}}
{{- urlquery . | replace "+" "%20" -}}
{{- end -}}
