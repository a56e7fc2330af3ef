{{/* The release's base name: the release name, with "cgpu" added unless it holds it. */}}
{{- define "cgpu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's object name, e.g. cgpu-device-plugin. Call with (list $ "device-plugin"). */}}
{{- define "cgpu.component" -}}
{{- printf "%s-%s" (include "cgpu.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{/* Selector labels of a component. app.kubernetes.io/name is cgpu-<component>, as in the
plain manifests, which the scrape configs, alerts and dashboard select on. */}}
{{- define "cgpu.selectorLabels" -}}
app.kubernetes.io/name: cgpu-{{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* All labels of a component's objects. Call with (list $ "component"). */}}
{{- define "cgpu.labels" -}}
{{- $root := index . 0 -}}
{{ include "cgpu.selectorLabels" . }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/part-of: cgpu
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "cgpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Pod spec fields shared by the node DaemonSets. */}}
{{- define "cgpu.nodePodSpec" -}}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The scheduler pods' placement and pull secrets. */}}
{{- define "cgpu.schedulerPodSpec" -}}
{{- with .Values.scheduler.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.scheduler.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.scheduler.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* scheduler.unlimitedNeighbours, with auto resolved: ignore where the compute arbiter runs
(pods without a compute limit are best effort under it), count where it does not. */}}
{{- define "cgpu.unlimitedNeighbours" -}}
{{- $value := .Values.scheduler.unlimitedNeighbours -}}
{{- if eq $value "auto" -}}
{{- ternary "ignore" "count" (.Values.computeArbiter.enabled | default false) -}}
{{- else -}}
{{- $value -}}
{{- end -}}
{{- end -}}

{{/* The extender container, less its name. Call with (list $ "ADDRESS"). */}}
{{- define "cgpu.extenderContainer" -}}
{{- $ := index . 0 -}}
image: {{ include "cgpu.image" $ }}
imagePullPolicy: {{ $.Values.image.pullPolicy }}
command: ["cgpu", "scheduler-extender"]
args:
  - --address={{ index . 1 }}
  - --port={{ $.Values.scheduler.port }}
  - --node-policy={{ $.Values.scheduler.nodePolicy }}
  - --gpu-policy={{ $.Values.scheduler.gpuPolicy }}
  - --assume-timeout={{ $.Values.scheduler.assumeTimeoutSeconds }}
  - --unlimited-neighbours={{ include "cgpu.unlimitedNeighbours" $ }}
  - --log-level={{ $.Values.scheduler.logLevel }}
resources:
  {{- toYaml $.Values.scheduler.resources | nindent 2 }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{/* The extender's URL as kube-scheduler calls it. */}}
{{- define "cgpu.extenderURL" -}}
{{- $s := .Values.scheduler -}}
{{- if eq $s.mode "profile" -}}
{{- printf "http://127.0.0.1:%v/gpushare-scheduler" $s.port -}}
{{- else if $s.extender.urlPrefix -}}
{{- $s.extender.urlPrefix -}}
{{- else if eq $s.extender.service.type "NodePort" -}}
{{- printf "http://127.0.0.1:%v/gpushare-scheduler" $s.extender.service.nodePort -}}
{{- else -}}
{{- fail "scheduler.extender.urlPrefix is required when scheduler.extender.service.type is ClusterIP (kube-scheduler on the control plane has no cluster DNS: use http://<cluster IP>:<port>/gpushare-scheduler)" -}}
{{- end -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration: the profile's own (mode profile) or the control plane's
(mode extender). */}}
{{- define "cgpu.schedulerConfig" -}}
{{- $s := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
{{- if eq $s.mode "profile" }}
leaderElection:
  leaderElect: {{ $s.profile.leaderElect }}
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ $s.profile.schedulerName }}
profiles:
  - schedulerName: {{ $s.profile.schedulerName }}
{{- else }}
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
leaderElection:
  leaderElect: true
{{- end }}
extenders:
  - urlPrefix: {{ include "cgpu.extenderURL" . }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: {{ $s.weight }}
    enableHTTPS: false
    nodeCacheCapable: true
    httpTimeout: {{ $s.httpTimeout }}
    managedResources:
      - name: {{ .Values.resourceName }}
        ignoredByScheduler: false
      {{- if .Values.computeResourceName }}
      - name: {{ .Values.computeResourceName }}
        ignoredByScheduler: false
      {{- end }}
{{- end -}}

{{/* Checks across values that values.schema.json cannot express. */}}
{{- define "cgpu.validate" -}}
{{- if eq .Values.resourceName "volcano.sh/gpu-memory" -}}
{{- if ne .Values.memoryUnit "MiB" -}}
{{- fail "resourceName volcano.sh/gpu-memory counts MiB: set memoryUnit=MiB" -}}
{{- end -}}
{{- if .Values.scheduler.enabled -}}
{{- fail "resourceName volcano.sh/gpu-memory is placed by Volcano's scheduler: set scheduler.enabled=false" -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.isolation "mps" -}}
{{- if not .Values.mps.enabled -}}
{{- fail "isolation=mps needs the MPS control daemons: set mps.enabled=true" -}}
{{- end -}}
{{- if eq .Values.resourceName "volcano.sh/gpu-memory" -}}
{{- fail "isolation=mps is not available with resourceName volcano.sh/gpu-memory" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.dra.enabled (not .Values.dra.migrating) (or .Values.devicePlugin.enabled .Values.scheduler.enabled) -}}
{{- fail "dra.enabled replaces the device plugin and the scheduler extender: set devicePlugin.enabled=false and scheduler.enabled=false (or dra.migrating=true while nodes move to DRA)" -}}
{{- end -}}
{{- if and .Values.scheduler.enabled (eq .Values.scheduler.mode "extender") (gt (int .Values.scheduler.replicas) 1) -}}
{{- fail "scheduler.mode=extender runs one extender (scheduler.replicas=1): kube-scheduler calls one Service, and one extender must decide every bind" -}}
{{- end -}}
{{- end -}}
