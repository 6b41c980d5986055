{{/*
Platform presets: the host paths (and on OpenShift, Multus) that Istio's own
platform profiles (manifests/helm-profiles/platform-*.yaml) set for
istio-cni, so the plugin lands where the platform's runtime looks for it.
A preset fills a value left at its chart default; a value set to anything
else wins. k3s: data/cni is the directory k3s keeps pointing at the current
release's CNI binaries across upgrades.
*/}}
{{- define "sluice.platformPresets" -}}
gke:
  cniBinDir: /home/kubernetes/bin
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
{{- end -}}

{{/* The chart defaults the presets replace (values.yaml; a render test holds them equal). */}}
{{- define "sluice.platformDefaults" -}}
cniBinDir: /opt/cni/bin
cniConfDir: /etc/cni/net.d
cniNetnsDir: /var/run/netns
chained: true
provider: default
{{- end -}}

{{/*
The platform: .Values.platform, else gke when the API server's version names
GKE (a "-gke" in its git version), as istio-cni's chart detects GKE's CNI
bin dir.
*/}}
{{- define "sluice.platform" -}}
{{- $p := .Values.platform | default "" -}}
{{- if and (not $p) (contains "-gke" .Capabilities.KubeVersion.GitVersion) -}}
gke
{{- else -}}
{{ $p }}
{{- end -}}
{{- end -}}

{{/* sluice.setting (list $ "cniBinDir"): the value the chart renders for a platform-dependent key. */}}
{{- define "sluice.setting" -}}
{{- $root := index . 0 -}}
{{- $key := index . 1 -}}
{{- $presets := include "sluice.platformPresets" $root | fromYaml -}}
{{- $defaults := include "sluice.platformDefaults" $root | fromYaml -}}
{{- $platform := include "sluice.platform" $root -}}
{{- if and $platform (not (hasKey $presets $platform)) -}}
{{- fail (printf "platform %q: want one of %s" $platform (keys $presets | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $preset := get $presets $platform | default dict -}}
{{- $v := index $root.Values $key -}}
{{- if and (eq (toString $v) (toString (get $defaults $key))) (hasKey $preset $key) -}}
{{ get $preset $key }}
{{- else -}}
{{ $v }}
{{- end -}}
{{- end -}}
