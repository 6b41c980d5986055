{{/*
Platform presets: what Istio's own platform profiles
(manifests/helm-profiles/platform-*.yaml) set for istio-cni, so the plugin
lands where the platform's runtime looks for it and the agent's pod is
admitted. A preset fills a value left empty; a value you set wins, keys of
seLinuxOptions one by one. k3s: data/cni is the directory k3s keeps
pointing at the current release's CNI binaries across upgrades. gke: the
quota only outside kube-system (sluice.resolve).
*/}}
{{- define "sluice.platformPresets" -}}
gke:
  cniBinDir: /home/kubernetes/bin
  resourceQuotas: true
k3d:
  cniBinDir: /bin
  cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
k3s:
  cniBinDir: /var/lib/rancher/k3s/data/cni
  cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
microk8s:
  cniBinDir: /var/snap/microk8s/current/opt/cni/bin
  cniConfDir: /var/snap/microk8s/current/args/cni-network
minikube:
  cniNetnsDir: /var/run/docker/netns
openshift:
  cniBinDir: /var/lib/cni/bin
  cniConfDir: /etc/cni/multus/net.d
  chained: false
  provider: multus
  seLinuxOptions:
    type: spc_t
{{- end -}}

{{/* What an empty value means with no preset. values.yaml leaves these
empty (Helm cannot tell a value set to its default from one left unset);
TestPlatformDefaultsEmptyInValues holds it. */}}
{{- define "sluice.platformDefaults" -}}
cniBinDir: /opt/cni/bin
cniConfDir: /etc/cni/net.d
cniNetnsDir: /var/run/netns
chained: true
provider: default
{{- end -}}

{{/* Istio's profiles (files/profile-*.yaml of its charts); only ambient
sets anything sluice has. */}}
{{- define "sluice.istioProfiles" -}}
ambient demo preview remote stable
{{- end -}}

{{/*
The platform: platform, else global.platform (Istio's charts read both),
else gke when the API server's version names GKE (a "-gke" in its git
version), as istio-cni's chart detects GKE's CNI bin dir.
*/}}
{{- define "sluice.platform" -}}
{{- $p := .Values.platform | default ((.Values.global).platform) | default "" -}}
{{- if and (not $p) (contains "-gke" .Capabilities.KubeVersion.GitVersion) -}}
gke
{{- else -}}
{{ $p }}
{{- end -}}
{{- end -}}

{{/*
sluice.resolve fills, in .Values itself, every value left empty from the
platform preset, Istio's profile and Istio's globals, so every template
(and every other chart author's) reads one answer. templates/zz_resolve.yaml
runs it: Helm renders a chart's templates in reverse name order, so that
file comes first, as Istio's zzz_profile.yaml does (TestResolvedBeforeEveryTemplate).
*/}}
{{- define "sluice.resolve" -}}
{{- $v := .Values -}}
{{- $g := $v.global | default dict -}}
{{- $presets := include "sluice.platformPresets" . | fromYaml -}}
{{- $defaults := include "sluice.platformDefaults" . | fromYaml -}}
{{- $platform := include "sluice.platform" . -}}
{{- if and $platform (not (hasKey $presets $platform)) -}}
{{- fail (printf "platform %q: want one of %s" $platform (keys $presets | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $preset := get $presets $platform | default dict -}}
{{- $_ := set $v "platform" $platform -}}
{{- range $key := list "cniBinDir" "cniConfDir" "cniNetnsDir" -}}
{{- if not (index $v $key) -}}
{{- $_ := set $v $key (get $preset $key | default (get $defaults $key)) -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "bool" $v.chained) -}}
{{- $_ := set $v "chained" (ternary (get $preset "chained") true (hasKey $preset "chained")) -}}
{{- end -}}
{{- /* Multus runs only an own conflist: with chained set true, the
preset's provider does not apply. */ -}}
{{- if not $v.provider -}}
{{- $_ := set $v "provider" (ternary "default" (get $preset "provider" | default "default") $v.chained) -}}
{{- end -}}
{{- with $preset.seLinuxOptions -}}
{{- $_ := set $v "seLinuxOptions" (mergeOverwrite (deepCopy .) ($v.seLinuxOptions | default dict)) -}}
{{- end -}}
{{- $quotas := $v.resourceQuotas | default dict -}}
{{- if not (kindIs "bool" $quotas.enabled) -}}
{{- $_ := set $quotas "enabled" (and (hasKey $preset "resourceQuotas") (ne $.Release.Namespace "kube-system")) -}}
{{- end -}}
{{- $_ := set $v "resourceQuotas" $quotas -}}
{{- $profile := $v.profile | default $g.profile | default "" -}}
{{- if and $profile (not (has $profile (include "sluice.istioProfiles" . | splitList " "))) -}}
{{- fail (printf "profile %q: Istio's charts have %s" $profile (include "sluice.istioProfiles" . | splitList " " | join ", ")) -}}
{{- end -}}
{{- $ambient := $v.ambient | default dict -}}
{{- if not (kindIs "bool" $ambient.enabled) -}}
{{- $_ := set $ambient "enabled" (eq $profile "ambient") -}}
{{- end -}}
{{- if eq (toString $ambient.ipv6) "false" -}}
{{- fail "ambient.ipv6: false: sluice captures both IP families of every ambient pod (rules for a family the pod lacks match nothing) and has no switch for IPv4 only; remove it" -}}
{{- end -}}
{{- $_ := set $v "ambient" $ambient -}}
{{- $image := $v.image | default dict -}}
{{- $_ := set $image "pullPolicy" ($image.pullPolicy | default $g.imagePullPolicy | default "IfNotPresent") -}}
{{- $_ := set $v "image" $image -}}
{{- if not (has $image.pullPolicy (list "Always" "IfNotPresent" "Never")) -}}
{{- fail (printf "global.imagePullPolicy %q: want Always, IfNotPresent or Never" $image.pullPolicy) -}}
{{- end -}}
{{- $variant := $v.variant | default $g.variant | default "distroless" -}}
{{- if not (has $variant (list "distroless" "debug")) -}}
{{- fail (printf "global.variant %q: sluice has the product image (distroless) and debug" $variant) -}}
{{- end -}}
{{- $_ := set $v "variant" $variant -}}
{{- if not $v.logLevel -}}
{{- $_ := set $v "logLevel" (include "sluice.istioLogLevel" (($g.logging | default dict).level | default "info")) -}}
{{- end -}}
{{- if not $v.logFormat -}}
{{- $_ := set $v "logFormat" (ternary "json" "text" (eq (toString $g.logAsJson) "true")) -}}
{{- end -}}
{{- $np := $v.networkPolicy | default dict -}}
{{- if not (kindIs "bool" $np.enabled) -}}
{{- $_ := set $np "enabled" (eq (toString (($g.networkPolicy | default dict).enabled)) "true") -}}
{{- end -}}
{{- $_ := set $v "networkPolicy" $np -}}
{{- if not $v.resources -}}
{{- $_ := set $v "resources" ($g.defaultResources | default dict) -}}
{{- end -}}
{{- with $g.resourceScope -}}
{{- if ne . "all" -}}
{{- fail (printf "global.resourceScope %q: the sluice chart renders its namespaced and cluster-wide objects together; install it where the cluster's objects may be created (resourceScope all)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Istio's global.logging.level as sluice's: a bare level or scopes
(default:info,ambient:debug) of which default and cni count; none is
error. */}}
{{- define "sluice.istioLogLevel" -}}
{{- $level := "info" -}}
{{- range splitList "," . -}}
{{- $kv := splitList ":" (trim .) -}}
{{- if eq (len $kv) 1 }}{{ $level = index $kv 0 }}
{{- else if has (index $kv 0) (list "default" "cni") }}{{ $level = index $kv 1 }}{{ end -}}
{{- end -}}
{{- if eq $level "none" }}{{ $level = "error" }}{{ end -}}
{{- if not (has $level (list "debug" "info" "warn" "error")) -}}
{{- fail (printf "global.logging.level %q: sluice reads debug, info, warn, error or none, bare or as default:<level> or cni:<level>; set logLevel" .) -}}
{{- end -}}
{{ $level }}
{{- end -}}
