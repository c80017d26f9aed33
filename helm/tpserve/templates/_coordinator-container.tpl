{{/* The coordinator's container: tokenizer, scheduler and KV-block bookkeeping for one cluster (a
coordinator Deployment's pod, or a LeaderWorkerSet group's leader pod). */}}
{{- define "tpserve.coordinatorContainer" -}}
- name: coordinator
  image: {{ include "tpserve.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - tpserve-coordinator
    - --model
    - {{ include "tpserve.modelPath" . }}
    - --world-size
    - {{ include "tpserve.worldSize" . | quote }}
    - --pipeline-parallel-size
    - {{ .Values.pipelineParallelSize | default 1 | quote }}
    - --device
    - {{ .Values.device }}
    # Every interface of the pod: the Services forward to its IP.
    - --host
    - 0.0.0.0
    - --port
    - {{ .Values.coordinator.grpcPort | quote }}
    - --http-host
    - 0.0.0.0
    - --http-port
    - {{ .Values.coordinator.httpPort | quote }}
    - --admin-host
    - 0.0.0.0
    - --admin-port
    - {{ .Values.coordinator.adminPort | quote }}
    - --startup-timeout
    - {{ .Values.coordinator.startupTimeoutSeconds | quote }}
    - --step-timeout
    - {{ .Values.coordinator.stepTimeoutSeconds | quote }}
    - --heartbeat-interval
    - {{ .Values.coordinator.heartbeatIntervalSeconds | quote }}
    - --recovery-grace
    - {{ .Values.coordinator.recoveryGraceSeconds | quote }}
    - --shutdown-timeout
    - {{ .Values.coordinator.shutdownTimeoutSeconds | quote }}
    - --sampling-defaults
    - {{ .Values.coordinator.samplingDefaults | quote }}
    - --metrics-names
    - {{ .Values.coordinator.metricsNames | quote }}
    {{- with .Values.model.servedModelName }}
    - --served-model-name
    - {{ . | quote }}
    {{- end }}
    {{- range .Values.coordinator.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    # tpctl in this container talks to this coordinator: kubectl exec ... -- tpctl status
    - name: TPSERVE_COORDINATOR
      value: {{ printf "127.0.0.1:%d" (int .Values.coordinator.adminPort) | quote }}
    {{- include "tpserve.clusterTokenEnv" . | nindent 4 }}
    {{- include "tpserve.tlsEnv" . | nindent 4 }}
    {{- with .Values.adminKey.existingSecret }}
    - name: TPSERVE_ADMIN_KEY
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: admin-keys
    {{- end }}
    {{- with .Values.apiKeys.existingSecret }}
    - name: TPSERVE_API_KEY
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: api-keys
    {{- end }}
    {{- include "tpserve.extraEnv" . | nindent 4 }}
  ports:
    - name: grpc
      containerPort: {{ .Values.coordinator.grpcPort }}
    - name: http
      containerPort: {{ .Values.coordinator.httpPort }}
    - name: admin
      containerPort: {{ .Values.coordinator.adminPort }}
  {{- with .Values.coordinator.preStopSleepSeconds }}
  lifecycle:
    # Serving on while the endpoint removal reaches every proxy in front, so that none
    # sends a new request after SIGTERM has closed the door.
    preStop:
      exec:
        command: [sleep, {{ . | quote }}]
  {{- end }}
  livenessProbe:
    httpGet:
      path: /health
      port: http
    {{- toYaml .Values.coordinator.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /health/ready
      port: http
    {{- toYaml .Values.coordinator.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.coordinator.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.coordinator.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "tpserve.volumeMounts" . | nindent 4 }}
{{- end }}
