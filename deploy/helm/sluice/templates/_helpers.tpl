{{/* The name of every object: <release>-agent unless overridden. */}}
{{- define "sluice.fullname" -}}
{{- $name := printf "%s-agent" .Release.Name -}}
{{- with .Values.fullnameOverride }}{{ $name = . }}{{ end -}}
{{- with .Values.revision }}{{ $name = printf "%s-%s" $name . }}{{ end -}}
{{- $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- with .Values.revision }}
istio.io/rev: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image: repository, or <hub>/sluice with hub from image.hub,
global.hub (as istio-cni reads it) or the project's registry; by digest
when one is given. */}}
{{- define "sluice.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if eq .Values.variant "debug" }}{{ $tag = printf "%s-debug" $tag }}{{ end -}}
{{- $repo := .Values.image.repository -}}
{{- if not $repo -}}
{{- $global := (.Values.global).hub | default "" -}}
{{- /* Istio's own registries hold no sluice image: only a mirror counts. */ -}}
{{- if has (trimSuffix "/" $global) (include "sluice.istioHubs" . | splitList " ") }}{{ $global = "" }}{{ end -}}
{{- $hub := .Values.image.hub | default $global | default "ghcr.io/sluicemesh" -}}
{{- $repo = printf "%s/sluice" (trimSuffix "/" $hub) -}}
{{- end -}}
{{- with .Values.image.digest }}{{ printf "%s@%s" $repo . }}{{ else }}{{ printf "%s:%s" $repo $tag }}{{ end -}}
{{- end -}}

{{/* Istio's public registries (global.hub values that are no mirror). */}}
{{- define "sluice.istioHubs" -}}
docker.io/istio gcr.io/istio-release gcr.io/istio-testing registry.istio.io/release registry.istio.io/testing
{{- end -}}

{{/* imagePullSecrets and global.imagePullSecrets, as objects; Istio's
values give names. */}}
{{- define "sluice.imagePullSecrets" -}}
{{- $out := list -}}
{{- range concat (.Values.imagePullSecrets | default list) ((.Values.global).imagePullSecrets | default list) -}}
{{- if kindIs "string" . }}{{ $out = append $out (dict "name" .) }}{{ else }}{{ $out = append $out . }}{{ end -}}
{{- end -}}
{{- with uniq $out }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The pod's labels: the chart's, podLabels over them, the selector's
last (a pod the selector misses would never be the DaemonSet's). */}}
{{- define "sluice.podLabels" -}}
{{- $l := dict "app" "sluice-agent" -}}
{{- $l = mustMergeOverwrite $l (deepCopy (.Values.podLabels | default dict)) (include "sluice.selectorLabels" . | fromYaml) -}}
{{- toYaml $l -}}
{{- end -}}

{{/* The pod's annotations: the chart's, podAnnotations over them. */}}
{{- define "sluice.podAnnotations" -}}
{{- $a := dict "prometheus.io/scrape" "true" "prometheus.io/port" (toString .Values.healthPort) "prometheus.io/path" "/metrics" -}}
{{- if and .Values.appArmorAnnotation .Values.appArmorProfile -}}
{{- $_ := set $a "container.apparmor.security.beta.kubernetes.io/sluice-agent" (include "sluice.appArmorAnnotation" .) -}}
{{- end -}}
{{- $a = mustMergeOverwrite $a (deepCopy (.Values.podAnnotations | default dict)) -}}
{{- toYaml $a -}}
{{- end -}}

{{/* Where the host's CNI directories appear inside the container. */}}
{{- define "sluice.cniBinMount" -}}/host/cni/bin{{- end -}}
{{- define "sluice.cniConfMount" -}}/host/cni/net.d{{- end -}}

{{/* The legacy (before 1.30) AppArmor annotation value of appArmorProfile. */}}
{{- define "sluice.appArmorAnnotation" -}}
{{- $p := .Values.appArmorProfile -}}
{{- if eq $p.type "RuntimeDefault" -}}runtime/default
{{- else if eq $p.type "Unconfined" -}}unconfined
{{- else if eq $p.type "Localhost" -}}localhost/{{ $p.localhostProfile }}
{{- else -}}{{ fail (printf "appArmorProfile.type %q: want RuntimeDefault, Unconfined or Localhost" $p.type) }}
{{- end -}}
{{- end -}}

{{/* sluice-agent's flags (test/deploy checks the list against
`sluice-agent --help`): extraArgs and SLUICE_ env names outside it fail
the render with one line naming the value, before a pod crash-loops. */}}
{{- define "sluice.agentFlags" -}}
  allowed-uids ambient ambient-dns-capture ambient-enablement-selectors
  chained check-config cleanup-on-uninstall cni-bin-dir cni-conf-dir cni-conf-name
  cni-network-name default-mode drain-timeout exclude-namespaces
  health-addr host-netns host-proc install istio-takeover kubeconfig
  log-format log-level max-inflight netns-roots node-condition node-name nri-socket
  plugin-binary plugin-log-level plugin-status plugin-timeout pod-name
  pod-namespace
  probe-snat-ipv4 probe-snat-ipv6 probe-snat-uid remove-istio-cni-entry repair-label
  repair-mode resync-interval socket standalone-service-account startup-taint state-dir
  trigger uninstall-on-exit verify-interval ztunnel-connect-wait ztunnel-socket
{{- end -}}

{{/* istio-cni's own variables (its agent's flags as env, its env
registrations, its chart's ConfigMap and env), which sluice-agent does not
read: set in env they would do nothing, so the render fails naming them.
HOST_PROBE_SNAT_IP and _IPV6, NODE_NAME, POD_NAME and POD_NAMESPACE are
read and not listed. test/deploy derives the list from the pinned Istio. */}}
{{- define "sluice.istioEnv" -}}
  ALLOW_SWITCH_TO_HOST_NS AMBIENT_DISABLE_SAFE_UPGRADE AMBIENT_DNS_CAPTURE
  AMBIENT_ENABLED AMBIENT_ENABLEMENT_SELECTOR AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE
  AMBIENT_IPV6 AMBIENT_RECONCILE_POD_RULES_ON_STARTUP AMBIENT_TPROXY_REDIRECTION
  AMBIENT_USE_SCOPED_XTABLES_LOCKING CHAINED_CNI_PLUGIN CNI_AGENT_RUN_DIR
  CNI_CONF_GROUP_READ CNI_CONF_NAME CNI_EVENT_ADDRESS CNI_NETWORK_CONFIG
  CNI_NETWORK_CONFIG_FILE CURRENT_AGENT_VERSION ENABLE_AMBIENT_DETECTION_RETRY
  EXCLUDE_NAMESPACES ISTIO_OWNED_CNI_CONFIG ISTIO_OWNED_CNI_CONFIG_FILENAME
  ISTIO_OWNED_CNI_CONF_FILENAME KUBECONFIG_MODE KUBE_CA_FILE LOG_LEVEL
  LOG_UDS_SOCKET MONITORING_PORT MOUNTED_CNI_NET_DIR NATIVE_NFTABLES
  REPAIR_BROKEN_POD_LABEL_KEY REPAIR_BROKEN_POD_LABEL_VALUE REPAIR_DELETE_PODS
  REPAIR_ENABLED REPAIR_FIELD_SELECTORS REPAIR_INIT_CONTAINER_EXIT_CODE
  REPAIR_INIT_CONTAINER_NAME REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE
  REPAIR_LABEL_PODS REPAIR_LABEL_SELECTORS REPAIR_NODE_NAME REPAIR_REPAIR_PODS
  REPAIR_RUN_AS_DAEMON REPAIR_SIDECAR_ANNOTATION REVISION SKIP_TLS_VERIFY
  SYSTEM_NAMESPACE ZTUNNEL_UDS_ADDRESS
{{- end -}}

{{- define "sluice.checkArgs" -}}
{{- $known := include "sluice.agentFlags" . | splitList "\n" | join " " | splitList " " | compact -}}
{{- range .Values.extraArgs -}}
{{- $name := regexReplaceAll "^--?([^=]*).*$" . "${1}" -}}
{{- if not (has $name $known) -}}
{{- fail (printf "extraArgs: %q: sluice-agent has no flag --%s (sluice-agent --help lists them)" . $name) -}}
{{- end -}}
{{- end -}}
{{- $istio := include "sluice.istioEnv" . | splitList "\n" | join " " | splitList " " | compact -}}
{{- range $k, $_ := .Values.env -}}
{{- if has $k $istio -}}
{{- fail (printf "env: %s is istio-cni's variable, which sluice-agent does not read; docs/istio-compatibility.md names the sluice value or flag for each" $k) -}}
{{- end -}}
{{- if hasPrefix "SLUICE_" $k -}}
{{- $name := $k | trimPrefix "SLUICE_" | lower | replace "_" "-" -}}
{{- if not (has $name $known) -}}
{{- fail (printf "env: %s is not a sluice-agent variable (each flag --x-y reads SLUICE_X_Y; sluice-agent --help lists them)" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
