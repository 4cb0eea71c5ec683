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
The environment every jobq container gets: the servers (non-secret settings), where the role's
credentials are mounted (*_FILE: never a credential itself), routing, logging, and topic handling
(services never create topics here). (dict "root" $ "role" "gateway" ["files" (dict KEY SETTING)]
["tokens" true])
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
{{- with $v.routing.queuesAllowed }}
- name: JOBQ_QUEUES_ALLOWED
  value: {{ join "," . | quote }}
{{- end }}
- name: JOBQ_LOG_FORMAT
  value: json
- name: JOBQ_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: JOBQ_METRICS_HOST
  value: 0.0.0.0
{{- range $key, $setting := include "jobq.secretFiles" . | fromJson }}
- name: {{ $setting }}
  value: {{ printf "/etc/jobq/credentials/%s" $key | quote }}
{{- end }}
{{- if and .tokens $v.tokens.existingSecret }}
- name: JOBQ_TOKENS_FILE
  value: /etc/jobq/tokens/tokens.toml
{{- end }}
{{- range $name, $value := $v.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/*
The role's credentials as files: key of the role's Secret -> the setting that names its file, as JSON
(for fromJson). Every role: Redis (redis.auth), Kafka SASL (PLAIN, SCRAM-*), the Consul ACL token
(consul.aclToken); plus the component's own (`files` of the context: a callback secret, a token list).
*/}}
{{- define "jobq.secretFiles" -}}
{{- $v := .root.Values -}}
{{- $files := dict -}}
{{- if $v.redis.auth.username }}{{ $_ := set $files "redis-username" "JOBQ_REDIS_USERNAME_FILE" }}{{ end -}}
{{- if $v.redis.auth.password }}{{ $_ := set $files "redis-password" "JOBQ_REDIS_PASSWORD_FILE" }}{{ end -}}
{{- if has $v.kafka.saslMechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512") -}}
{{- $_ := set $files "kafka-username" "JOBQ_KAFKA_SASL_USERNAME_FILE" -}}
{{- $_ := set $files "kafka-password" "JOBQ_KAFKA_SASL_PASSWORD_FILE" -}}
{{- end -}}
{{- if $v.consul.aclToken }}{{ $_ := set $files "consul-token" "JOBQ_CONSUL_TOKEN_FILE" }}{{ end -}}
{{- range $key, $setting := (.files | default dict) }}{{ $_ := set $files $key $setting }}{{ end -}}
{{- toJson $files -}}
{{- end -}}

{{/* A component's own settings (its `env` value). */}}
{{- define "jobq.componentEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/*
Volumes every jobq pod has: a writable /tmp (the root filesystem is read-only), the TLS files, the role's
credentials (only the keys it uses, readable by the pod's group only) and, in the gateways and the
dashboard, the tokens file. (the context of jobq.env)
*/}}
{{- define "jobq.volumes" -}}
{{- $v := .root.Values -}}
- name: tmp
  emptyDir: {}
{{- with $v.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- $files := include "jobq.secretFiles" . | fromJson }}
{{- if $files }}
- name: credentials
  secret:
    secretName: {{ index $v.credentials .role }}
    defaultMode: 0440
    items:
      {{- range $key, $_ := $files }}
      - {key: {{ $key }}, path: {{ $key }}}
      {{- end }}
{{- end }}
{{- if and .tokens $v.tokens.existingSecret }}
- name: tokens
  secret:
    secretName: {{ $v.tokens.existingSecret }}
    defaultMode: 0440
    items:
      - {key: {{ $v.tokens.key | quote }}, path: tokens.toml}
{{- end }}
{{- end -}}

{{- define "jobq.volumeMounts" -}}
{{- $v := .root.Values -}}
- name: tmp
  mountPath: /tmp
{{- if $v.tls.existingSecret }}
- name: tls
  mountPath: /etc/jobq/tls
  readOnly: true
{{- end }}
{{- if include "jobq.secretFiles" . | fromJson }}
- name: credentials
  mountPath: /etc/jobq/credentials
  readOnly: true
{{- end }}
{{- if and .tokens $v.tokens.existingSecret }}
- name: tokens
  mountPath: /etc/jobq/tokens
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
            {{- include "jobq.volumeMounts" . | nindent 12 }}
      volumes:
        {{- include "jobq.volumes" . | nindent 8 }}
{{- end -}}

{{/* An instance name from the pod's own name (relay holder, scheduler name): unique and stable per pod. */}}
{{- define "jobq.holderEnv" -}}
- name: {{ . }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}
