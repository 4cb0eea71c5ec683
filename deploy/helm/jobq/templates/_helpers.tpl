{{/*
Names and labels. Every object is named <release>-jobq-<component> (or the release name when it already
holds "jobq") and labelled with the standard app.kubernetes.io/* labels plus its component.
*/}}
{{- define "jobq.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: (dict "root" $ "component" "gateway") */}}
{{- define "jobq.name" -}}
{{- printf "%s-%s" (include "jobq.fullname" .root) .component -}}
{{- end -}}

{{- define "jobq.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "jobq.labels" -}}
{{ include "jobq.selectorLabels" . }}
app.kubernetes.io/part-of: jobq
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "jobq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "jobq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image: (dict "root" $ "image" .Values.image) */}}
{{- define "jobq.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/*
The environment every jobq container gets: the servers (non-secret settings), the role's credentials
from its Secret, routing, logging, and topic handling (services never create topics here).
(dict "root" $ "role" "gateway")
*/}}
{{- define "jobq.env" -}}
{{- $v := .root.Values -}}
- name: JOBQ_KAFKA_BOOTSTRAP
  value: {{ $v.kafka.bootstrap | quote }}
- name: JOBQ_KAFKA_SECURITY_PROTOCOL
  value: {{ $v.kafka.securityProtocol | quote }}
{{- with $v.kafka.saslMechanism }}
- name: JOBQ_KAFKA_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- with $v.kafka.sslCaLocation }}
- name: JOBQ_KAFKA_SSL_CA_LOCATION
  value: {{ . | quote }}
{{- end }}
{{- with $v.kafka.sslCertificateLocation }}
- name: JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION
  value: {{ . | quote }}
{{- end }}
{{- with $v.kafka.sslKeyLocation }}
- name: JOBQ_KAFKA_SSL_KEY_LOCATION
  value: {{ . | quote }}
{{- end }}
- name: JOBQ_KAFKA_REPLICATION
  value: {{ $v.kafka.replication | quote }}
- name: JOBQ_KAFKA_CREATE_TOPICS
  value: "false"
- name: JOBQ_REDIS_URL
  value: {{ $v.redis.url | quote }}
- name: JOBQ_REDIS_TLS
  value: {{ $v.redis.tls | quote }}
- name: JOBQ_REDIS_CLUSTER
  value: {{ $v.redis.cluster | quote }}
{{- with $v.redis.tlsCaFile }}
- name: JOBQ_REDIS_TLS_CA_FILE
  value: {{ . | quote }}
{{- end }}
{{- with $v.redis.tlsCertFile }}
- name: JOBQ_REDIS_TLS_CERT_FILE
  value: {{ . | quote }}
{{- end }}
{{- with $v.redis.tlsKeyFile }}
- name: JOBQ_REDIS_TLS_KEY_FILE
  value: {{ . | quote }}
{{- end }}
- name: JOBQ_CONSUL_ADDR
  value: {{ $v.consul.addr | quote }}
- name: JOBQ_CONSUL_VERIFY
  value: {{ $v.consul.verify | quote }}
{{- with $v.consul.caFile }}
- name: JOBQ_CONSUL_CA_FILE
  value: {{ . | quote }}
{{- end }}
{{- with $v.consul.certFile }}
- name: JOBQ_CONSUL_CERT_FILE
  value: {{ . | quote }}
{{- end }}
{{- with $v.consul.keyFile }}
- name: JOBQ_CONSUL_KEY_FILE
  value: {{ . | quote }}
{{- end }}
- name: JOBQ_DEFAULT_TOPIC
  value: {{ $v.routing.defaultTopic | quote }}
{{- with $v.routing.routes }}
- name: JOBQ_ROUTES
  value: {{ toJson . | quote }}
{{- end }}
- name: JOBQ_LOG_FORMAT
  value: json
- name: JOBQ_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: JOBQ_METRICS_HOST
  value: 0.0.0.0
{{- include "jobq.credentials" . }}
{{- range $name, $value := $v.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* The role's server credentials, each from its own Secret (every key optional). */}}
{{- define "jobq.credentials" -}}
{{- $secret := index .root.Values.credentials .role -}}
{{- range $env, $key := dict "JOBQ_KAFKA_SASL_USERNAME" "kafka-username" "JOBQ_KAFKA_SASL_PASSWORD" "kafka-password" "JOBQ_REDIS_USERNAME" "redis-username" "JOBQ_REDIS_PASSWORD" "redis-password" "JOBQ_CONSUL_TOKEN" "consul-token" }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- end -}}

{{/* A required token from the role's Secret: (dict "root" $ "role" "gateway" "env" "JOBQ_GATE_TOKENS" "key" "gate-tokens") */}}
{{- define "jobq.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ index .root.Values.credentials .role }}
      key: {{ .key }}
{{- end -}}

{{/* A component's own settings (its `env` value). */}}
{{- define "jobq.componentEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* Volumes every jobq pod has: a writable /tmp (the root filesystem is read-only) and the TLS files. */}}
{{- define "jobq.volumes" -}}
- name: tmp
  emptyDir: {}
{{- with .Values.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- end -}}

{{- define "jobq.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.existingSecret }}
- name: tls
  mountPath: /etc/jobq/tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* The history tables, read-only, where `history.persistence.readers` asks for them. */}}
{{- define "jobq.historyReaderEnabled" -}}
{{- if and .Values.history.enabled .Values.history.persistence.enabled .Values.history.persistence.readers -}}true{{- end -}}
{{- end -}}

{{- define "jobq.historyClaim" -}}
{{- default (include "jobq.name" (dict "root" . "component" "history")) .Values.history.persistence.existingClaim -}}
{{- end -}}

{{/*
Liveness on /healthz, readiness on /readyz (docs/deploy.md "Probes"), on a named port:
(dict "port" "http") or (dict "port" "http" "ready" "/healthz") where a service has no /readyz.
*/}}
{{- define "jobq.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: {{ .ready | default "/readyz" }}
    port: {{ .port }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
startupProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 2
  failureThreshold: 30
{{- end -}}

{{/* preStop: keep serving this many seconds while the endpoints controller takes the pod out. */}}
{{- define "jobq.lifecycle" -}}
{{- if gt (int .seconds) 0 }}
{{ printf "lifecycle:\n  preStop:\n    exec:\n      command: [\"sleep\", \"%d\"]" (int .seconds) | indent .indent }}
{{- end }}
{{- end -}}

{{/* Pod-level settings every workload shares. */}}
{{- define "jobq.podCommon" -}}
serviceAccountName: {{ include "jobq.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The canary's queue of every routed topic (canary.<topic>): the default topic and each route's. */}}
{{- define "jobq.workerQueues" -}}
{{- $queues := list -}}
{{- range .Values.worker.queues }}{{ $queues = append $queues . }}{{ end -}}
{{- if and .Values.worker.canaryQueues .Values.canary.enabled -}}
{{- $topics := list .Values.routing.defaultTopic -}}
{{- range .Values.routing.routes }}{{ $topics = append $topics .topic }}{{ end -}}
{{- range ($topics | uniq) }}{{ $queues = append $queues (printf "canary.%s" .) }}{{ end -}}
{{- end -}}
{{- $queues | uniq | join "," -}}
{{- end -}}

{{/* The metrics Service of a component without an API of its own: what a ServiceMonitor scrapes. */}}
{{- define "jobq.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "jobq.name" . }}
  labels:
    {{- include "jobq.labels" . | nindent 4 }}
    jobq.io/scrape: "true"
spec:
  clusterIP: None
  selector:
    {{- include "jobq.selectorLabels" . | nindent 4 }}
  ports:
    - {name: metrics, port: {{ .root.Values.metricsPort }}, targetPort: metrics}
{{- end -}}

{{/*
A service of the internal kind (relay, scheduler, canary, worker): its Deployment, with /healthz,
/readyz and /metrics on the metrics port. (dict "root" $ "component" C "role" C "args" (list ...)
"settings" .Values.C "portEnv" "JOBQ_C_METRICS_PORT" "env" <extra env YAML> "image" <image values>
"grace" <seconds>)
*/}}
{{- define "jobq.internalDeployment" -}}
{{- $v := .root.Values -}}
{{- $c := .settings -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "jobq.name" . }}
  labels:
    {{- include "jobq.labels" . | nindent 4 }}
spec:
  {{- if not .scaled }}
  replicas: {{ $c.replicas }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "jobq.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "jobq.labels" . | nindent 8 }}
    spec:
      {{- include "jobq.podCommon" .root | nindent 6 }}
      terminationGracePeriodSeconds: {{ .grace }}
      containers:
        - name: {{ .component }}
          image: {{ include "jobq.image" (dict "root" .root "image" .image) }}
          imagePullPolicy: {{ .image.pullPolicy | default $v.image.pullPolicy }}
          args: {{ toJson .args }}
          ports:
            - {name: metrics, containerPort: {{ $v.metricsPort }}}
          env:
            {{- include "jobq.env" . | nindent 12 }}
            - name: {{ .portEnv }}
              value: {{ $v.metricsPort | quote }}
            {{- with .env }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            {{- with $c.env }}
            {{- include "jobq.componentEnv" . | trim | nindent 12 }}
            {{- end }}
          {{- include "jobq.probes" (dict "port" "metrics") | nindent 10 }}
          {{- include "jobq.lifecycle" (dict "seconds" ($c.preStopSeconds | default 0) "indent" 10) }}
          resources:
            {{- toYaml $c.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "jobq.volumeMounts" .root | nindent 12 }}
      volumes:
        {{- include "jobq.volumes" .root | nindent 8 }}
{{- end -}}

{{/* An instance name from the pod's own name (relay holder, scheduler name): unique and stable per pod. */}}
{{- define "jobq.holderEnv" -}}
- name: {{ . }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}
