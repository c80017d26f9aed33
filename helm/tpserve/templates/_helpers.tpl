{{/* Names. Kubernetes names are at most 63 characters; the worker StatefulSet's is at most 52,
because its pods carry a controller-revision-hash label of <name>-<10 characters>. The component
names shorten the full name, not their suffix, so that they never collide with it. */}}
{{- define "tpserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpserve.fullname" -}}
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

{{- define "tpserve.coordinatorName" -}}
{{- printf "%s-coordinator" (include "tpserve.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{- define "tpserve.workerName" -}}
{{- printf "%s-worker" (include "tpserve.fullname" . | trunc 45 | trimSuffix "-") }}
{{- end }}

{{- define "tpserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpserve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The labels of every object; selectors add app.kubernetes.io/component. */}}
{{- define "tpserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tpserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tpserve
{{- end }}

{{- define "tpserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tpserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (printf "%s-%s" .Chart.AppVersion .Values.device)) }}
{{- end }}

{{/* Worker ranks in all: tensorParallelSize × pipelineParallelSize. */}}
{{- define "tpserve.worldSize" -}}
{{- mul .Values.tensorParallelSize (.Values.pipelineParallelSize | default 1) }}
{{- end }}

{{/* Worker pods: the ranks / gpusPerNode (the schema makes this exact). */}}
{{- define "tpserve.workerPods" -}}
{{- div (include "tpserve.worldSize" . | int) .Values.workers.gpusPerNode }}
{{- end }}

{{/* host:port at which the workers reach the coordinator's ClusterService: its headless
Service, which lists the pod before it is ready. */}}
{{- define "tpserve.coordinatorAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "tpserve.coordinatorName" .) .Release.Namespace .Values.clusterDomain (int .Values.coordinator.grpcPort) }}
{{- end }}

{{/* host:port of AdminService for tpctl in a worker pod (its probes): the same Service. */}}
{{- define "tpserve.coordinatorAdminAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "tpserve.coordinatorName" .) .Release.Namespace .Values.clusterDomain (int .Values.coordinator.adminPort) }}
{{- end }}

{{- define "tpserve.modelPath" -}}
{{- printf "/models/%s" .Values.model.file }}
{{- end }}

{{/* The model volume and the volumes every pod has: /tmp, since the root filesystem is
read-only. */}}
{{- define "tpserve.volumes" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ .Values.model.pvc.claimName | quote }}
    readOnly: true
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ .Values.model.hostPath.path | quote }}
    type: Directory
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.model.download.sizeLimit }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- include "tpserve.tlsVolume" . }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "tpserve.volumeMounts" -}}
- name: model
  mountPath: /models
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- include "tpserve.tlsVolumeMount" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* With model.source download: the init container that fills the model volume. */}}
{{- define "tpserve.modelDownloadContainer" -}}
- name: model-download
  image: {{ .Values.model.download.image | default (include "tpserve.image" .) }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    {{- toYaml .Values.model.download.command | nindent 4 }}
  env:
    - name: HOME
      value: /tmp
    {{- with .Values.model.download.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
  {{- with .Values.model.download.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: model
      mountPath: /models
    - name: tmp
      mountPath: /tmp
{{- end }}

{{/* The Secret holding the cluster token under `token`. */}}
{{- define "tpserve.clusterTokenSecret" -}}
{{- default (printf "%s-cluster-token" (include "tpserve.fullname" . | trunc 49 | trimSuffix "-")) .Values.clusterToken.existingSecret }}
{{- end }}

{{/* With tls.existingSecret: where every pod mounts it, and the variables that give the
coordinator, the workers and tpctl their --tls-* flags (common/tls_flags.h). */}}
{{- define "tpserve.tlsDir" -}}/etc/tpserve/tls{{- end }}

{{- define "tpserve.tlsEnv" -}}
{{- if .Values.tls.existingSecret }}
- name: TPSERVE_TLS_CERT
  value: {{ printf "%s/tls.crt" (include "tpserve.tlsDir" .) | quote }}
- name: TPSERVE_TLS_KEY
  value: {{ printf "%s/tls.key" (include "tpserve.tlsDir" .) | quote }}
- name: TPSERVE_TLS_CA
  value: {{ printf "%s/ca.crt" (include "tpserve.tlsDir" .) | quote }}
- name: TPSERVE_TLS_SERVER_NAME
  value: {{ .Values.tls.serverName | quote }}
{{- end }}
{{- end }}

{{- define "tpserve.tlsVolume" -}}
{{- if .Values.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- end }}

{{- define "tpserve.tlsVolumeMount" -}}
{{- if .Values.tls.existingSecret }}
- name: tls
  mountPath: {{ include "tpserve.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The cluster token as a container's environment variable. */}}
{{- define "tpserve.clusterTokenEnv" -}}
- name: TPSERVE_CLUSTER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "tpserve.clusterTokenSecret" . }}
      key: token
{{- end }}

{{/* Seconds Kubernetes waits between a pod's termination and SIGKILL: the preStop sleep, the
drain's --shutdown-timeout, and a margin for stopping the workers. */}}
{{- define "tpserve.terminationGracePeriod" -}}
{{- add .Values.coordinator.preStopSleepSeconds .Values.coordinator.shutdownTimeoutSeconds 15 }}
{{- end }}

{{/* What every tpserve container adds to its environment (extraEnv). */}}
{{- define "tpserve.extraEnv" -}}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Where and how every tpserve pod runs: runtime class, priority, topology spread. */}}
{{- define "tpserve.podPlacement" -}}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
