package istiovalues

import (
	"fmt"
	"slices"
	"strings"
)

// Same is istio-cni's values that the sluice chart has under the same name
// and meaning (docs/istio-compatibility.md's table says so too).
var Same = []string{
	"cniBinDir", "cniConfDir", "cniNetnsDir", "chained", "provider", "excludeNamespaces",
	"affinity", "daemonSetLabels", "podAnnotations", "podLabels", "seccompProfile", "seLinuxOptions",
	"resources", "resourceQuotas", "tolerations", "updateStrategy", "terminationGracePeriodSeconds",
	"revision",
}

// IstioHubs are Istio's public registries: a hub there is no mirror, and
// holds no sluice image (the chart ignores them in global.hub too).
var IstioHubs = []string{"docker.io/istio", "gcr.io/istio-release", "gcr.io/istio-testing", "registry.istio.io/release", "registry.istio.io/testing"}

// Dropped is istio-cni's values with no sluice equivalent, and why.
var Dropped = map[string]string{
	"tag":                         "Istio's release tag; sluice's image has its own (the chart's appVersion)",
	"image":                       "istio-cni's image name; sluice's image is <hub>/sluice",
	"istioOwnedCNIConfig":         "sluice inserts into the primary conflist, or writes its own with chained: false",
	"istioOwnedCNIConfigFileName": "sluice's own conflist is YYY-sluice.conflist",
	"useAppArmorAnnotation":       "istio-cni runs unconfined; sluice runs with the runtime's default profile: set appArmorProfile: {type: Unconfined} (and appArmorAnnotation: true before Kubernetes 1.30) where that default keeps the agent out of pod network namespaces",
	"ownerName":                   "Helm bookkeeping of Istio's installer",
}

// droppedAmbient is ambient.* values with no sluice equivalent, and why.
var droppedAmbient = map[string]string{
	"reconcileIptablesOnStartup":  "the agent reconciles its journal with the kernel at start and every --resync-interval",
	"shareHostNetworkNamespace":   "the agent always runs in the host network namespace",
	"enableAmbientDetectionRetry": "the lookup always waits for the pod, then asks the API server",
	"configDir":                   "no equivalent",
}

// droppedGlobal is global.* values istio-cni reads that sluice does not.
var droppedGlobal = map[string]string{
	"tag":              "Istio's release tag; sluice's image has its own",
	"nativeNftables":   "sluice always programs nftables, over netlink",
	"resourceScope":    "the sluice chart renders every object",
	"defaultResources": "set resources instead",
}

func (c *converter) value(k string, v any, all map[string]any) {
	switch {
	case slices.Contains(Same, k):
		// Empty is the chart's own choice in both charts (cniBinDir: GKE's
		// detected, as istio-cni's chart detects it).
		if !empty(v) {
			c.set(k, v)
		}
	case k == "cniConfFileName":
		c.confFileName(v, all)
	case k == "hub":
		if h, _ := v.(string); slices.Contains(IstioHubs, strings.TrimSuffix(h, "/")) {
			c.note("hub: %s is Istio's own registry, which holds no sluice image; not converted", h)
		} else if !empty(v) {
			c.set("image.hub", v)
		}
	case k == "pullPolicy":
		if !empty(v) {
			c.set("image.pullPolicy", v)
		}
	case k == "variant":
		c.variant(v)
	case k == "logging":
		c.logLevel("logging.level", asMap(v)["level"])
	case k == "ambient":
		c.ambient(asMap(v))
	case k == "repair":
		c.repair(asMap(v))
	case k == "env":
		c.env(asMap(v))
	case Dropped[k] != "":
		if !empty(v) && v != false {
			c.note("%s: not converted: %s", k, Dropped[k])
		}
	default:
		c.note("%s: not an istio-cni value; ignored", k)
	}
}

// confFileName: with chained: true Istio's cniConfFileName is the primary
// conflist to chain into, as sluice's; with chained: false it names
// istio-cni's own file, which sluice names itself.
func (c *converter) confFileName(v any, all map[string]any) {
	if empty(v) {
		return
	}
	if chained, ok := all["chained"].(bool); ok && !chained {
		c.note("cniConfFileName: %v is istio-cni's own file with chained: false; sluice writes YYY-sluice.conflist", v)
		return
	}
	c.set("cniConfFileName", v)
}

func (c *converter) variant(v any) {
	switch v {
	case nil, "", "distroless":
	case "debug":
		c.set("variant", "debug")
	default:
		c.note("variant: %v has no sluice image; the product image is used", v)
	}
}

// logLevel reads Istio's level: a bare level or scopes ("default:info,cni:debug").
func (c *converter) logLevel(from string, v any) {
	s, _ := v.(string)
	if s == "" {
		return
	}
	level := s
	for _, scope := range strings.Split(s, ",") {
		if name, l, ok := strings.Cut(scope, ":"); ok && (name == "default" || name == "cni") {
			level = l
		}
	}
	switch level {
	case "debug", "info", "warn", "error":
		c.set("logLevel", level)
	case "none":
		c.set("logLevel", "error")
		c.note("%s: none: sluice logs errors at least (logLevel: error)", from)
	default:
		c.note("%s: %q not converted: want debug, info, warn, error or scopes of them", from, s)
	}
}

func (c *converter) ambient(a map[string]any) {
	for k, v := range a {
		switch k {
		case "enabled", "dnsCapture", "enablementSelectors":
			if v != nil {
				c.set("ambient."+k, v)
			}
		case "ipv6":
			// true is what sluice does; the chart refuses false.
			if v == false {
				c.note("ambient.ipv6: false is not converted: sluice captures both families of every ambient pod (rules for a family the pod lacks match nothing)")
			}
		default:
			if why, ok := droppedAmbient[k]; ok {
				c.note("ambient.%s: not converted: %s", k, why)
			} else {
				c.note("ambient.%s: not an istio-cni value; ignored", k)
			}
		}
	}
}

// repair maps istio-cni's three switches onto one mode, in the order
// Istio's repair controller tries them: repair in place, delete, label.
func (c *converter) repair(r map[string]any) {
	if len(r) == 0 {
		return
	}
	if enabled, ok := r["enabled"].(bool); ok {
		c.set("repair.enabled", enabled)
	}
	mode := "off"
	switch {
	case r["repairPods"] == true:
		mode = "apply"
	case r["deletePods"] == true:
		mode = "delete"
	case r["labelPods"] == true:
		mode = "label"
	}
	c.set("repair.mode", mode)
	if n := countTrue(r, "repairPods", "deletePods", "labelPods"); n > 1 {
		c.note("repair: %d of repairPods, deletePods, labelPods are true; Istio uses the first of them in that order, so repair.mode: %s", n, mode)
	}
	key, _ := r["brokenPodLabelKey"].(string)
	val := ""
	if v, ok := r["brokenPodLabelValue"]; ok && v != nil {
		val = fmt.Sprint(v) // YAML may read "true" unquoted as a bool
	}
	if key != "" {
		c.set("repair.label", key+"="+val)
	}
	if v, ok := r["initContainerName"]; ok && !empty(v) {
		c.note("repair.initContainerName: not converted: sluice finds uncaptured pods from its journal, not from a failed %v container", v)
	}
	for _, k := range []string{"hub", "tag"} {
		if !empty(r[k]) {
			c.note("repair.%s: not converted: repair is part of the agent", k)
		}
	}
}

func countTrue(m map[string]any, keys ...string) int {
	n := 0
	for _, k := range keys {
		if m[k] == true {
			n++
		}
	}
	return n
}

// env keeps the istio-cni variables the agent reads; the rest are named.
func (c *converter) env(e map[string]any) {
	for k, v := range e {
		switch k {
		case "HOST_PROBE_SNAT_IP", "HOST_PROBE_SNAT_IPV6":
			c.set("env."+k, v)
		default:
			c.note("env.%s: not converted: an istio-cni variable sluice-agent does not read (sluice-agent --help lists its SLUICE_ variables)", k)
		}
	}
}

func (c *converter) global(k string, v any) {
	switch k {
	case "hub":
		if h, _ := v.(string); slices.Contains(IstioHubs, strings.TrimSuffix(h, "/")) {
			c.note("global.hub: %s is Istio's own registry, which holds no sluice image; not converted", h)
		} else if !empty(v) {
			c.set("global.hub", v)
		}
	case "imagePullSecrets":
		if !empty(v) {
			c.set("global."+k, v)
		}
	case "imagePullPolicy":
		if !empty(v) {
			c.set("image.pullPolicy", v)
		}
	case "logAsJson":
		if v == true {
			c.set("logFormat", "json")
		}
	case "logging":
		if _, set := c.out["logLevel"]; !set {
			c.logLevel("global.logging.level", asMap(v)["level"])
		}
	case "networkPolicy":
		if e, ok := asMap(v)["enabled"].(bool); ok {
			c.set("networkPolicy.enabled", e)
		}
	case "variant":
		if _, set := c.out["variant"]; !set {
			c.variant(v)
		}
	default:
		if why, ok := droppedGlobal[k]; ok && !empty(v) && v != false {
			c.note("global.%s: not converted: %s", k, why)
		}
	}
}
