package istiovalues

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// istioProfiles is what each of the istio-cni chart's profile files
// (`files/profile-<name>.yaml` in the Istio release test/istio pins) sets
// that istio-cni's chart reads: its `cni:` and `global:` sections and its
// top-level istio-cni values. Istio's chart reads `profile`,
// `compatibilityVersion` and `platform` (or their `global.` forms) through
// those files, so the conversion must too. These are facts read from
// Istio's files, held to them by test/deploy's TestMigrateProfilesAreIstios
// (a new Istio release that changes one fails it).
var istioProfiles = map[string]map[string]any{
	"ambient": map[string]any{
		"cni": map[string]any{
			"ambient": map[string]any{
				"enabled": true,
			},
		},
		"global": map[string]any{
			"variant": "distroless",
		},
	},
	"compatibility-version-1.25": map[string]any{
		"ambient": map[string]any{
			"shareHostNetworkNamespace": true,
		},
		"cni": map[string]any{
			"ambient": map[string]any{
				"reconcileIptablesOnStartup": false,
			},
		},
	},
	"compatibility-version-1.26": map[string]any{
		"cni": map[string]any{
			"ambient": map[string]any{
				"reconcileIptablesOnStartup": false,
			},
		},
	},
	"compatibility-version-1.27": map[string]any{
		"cni": map[string]any{
			"ambient": map[string]any{
				"reconcileIptablesOnStartup": false,
			},
		},
	},
	"compatibility-version-1.28": map[string]any{
		"cni": map[string]any{
			"ambient": map[string]any{
				"reconcileIptablesOnStartup": false,
			},
		},
	},
	"compatibility-version-1.29": map[string]any{},
	"compatibility-version-1.30": map[string]any{},
	"demo": map[string]any{
		"cni": map[string]any{
			"resources": map[string]any{
				"requests": map[string]any{
					"cpu":    "10m",
					"memory": "40Mi",
				},
			},
		},
		"global": map[string]any{
			"proxy": map[string]any{
				"resources": map[string]any{
					"requests": map[string]any{
						"cpu":    "10m",
						"memory": "40Mi",
					},
				},
			},
			"waypoint": map[string]any{
				"resources": map[string]any{
					"requests": map[string]any{
						"cpu":    "10m",
						"memory": "40Mi",
					},
				},
			},
		},
	},
	"platform-gke": map[string]any{
		"cni": map[string]any{
			"cniBinDir": "",
			"resourceQuotas": map[string]any{
				"enabled": true,
			},
		},
		"resourceQuotas": map[string]any{
			"enabled": true,
		},
	},
	"platform-k3d": map[string]any{
		"cni": map[string]any{
			"cniBinDir":  "/bin",
			"cniConfDir": "/var/lib/rancher/k3s/agent/etc/cni/net.d",
		},
	},
	"platform-k3s": map[string]any{
		"cni": map[string]any{
			"cniBinDir":  "/var/lib/rancher/k3s/data/cni",
			"cniConfDir": "/var/lib/rancher/k3s/agent/etc/cni/net.d",
		},
	},
	"platform-microk8s": map[string]any{
		"cni": map[string]any{
			"cniBinDir":  "/var/snap/microk8s/current/opt/cni/bin",
			"cniConfDir": "/var/snap/microk8s/current/args/cni-network",
		},
	},
	"platform-minikube": map[string]any{
		"cni": map[string]any{
			"cniNetnsDir": "/var/run/docker/netns",
		},
	},
	"platform-openshift": map[string]any{
		"cni": map[string]any{
			"chained":         false,
			"cniBinDir":       "/var/lib/cni/bin",
			"cniConfDir":      "/etc/cni/multus/net.d",
			"cniConfFileName": "istio-cni.conf",
			"provider":        "multus",
		},
		"seLinuxOptions": map[string]any{
			"type": "spc_t",
		},
	},
	"preview": map[string]any{},
	"remote": map[string]any{
		"global": map[string]any{
			"omitSidecarInjectorConfigMap": true,
		},
	},
	"stable": map[string]any{},
}

func profile(kind, name string) (map[string]any, error) {
	p, ok := istioProfiles[kind+name]
	if !ok {
		var names []string
		for _, n := range slices.Sorted(maps.Keys(istioProfiles)) {
			if rest, ok := strings.CutPrefix(n, kind); ok && (kind != "" || !strings.Contains(n, "-")) {
				names = append(names, rest)
			}
		}
		what := map[string]string{"": "profile", "platform-": "platform", "compatibility-version-": "compatibilityVersion"}[kind]
		return nil, fmt.Errorf("%s %q: Istio's istio-cni chart has %s, and fails on any other", what, name, strings.Join(names, ", "))
	}
	return deepCopy(p), nil
}

// layered is what Istio's istio-cni chart renders from a values file
// (zzz_profile.yaml, zzy_descope_legacy.yaml): the defaults block, the
// profile, compatibility and platform files over it, the user's values
// over those, and then everything under `cni:` over the top level. A
// profile's `cni:` section therefore beats a top-level value the user
// set; the conversion keeps that, so the result renders what Istio's did.
func layered(doc map[string]any, platform bool) (map[string]any, error) {
	g := asMap(doc["global"])
	prof := map[string]any{}
	for _, l := range []struct{ kind, name string }{
		{"", str(doc["profile"], g["profile"])},
		{"compatibility-version-", str(doc["compatibilityVersion"])},
		{"platform-", str(doc["platform"], g["platform"])},
	} {
		if l.name == "" || (l.kind == "platform-" && !platform) {
			continue
		}
		p, err := profile(l.kind, l.name)
		if err != nil {
			return nil, err
		}
		merge(prof, p)
	}
	out := deepCopy(asMap(doc["_internal_defaults_do_not_set"]))
	merge(out, prof)
	user := maps.Clone(doc)
	delete(user, "_internal_defaults_do_not_set")
	merge(out, user)
	merge(out, deepCopy(asMap(out["cni"])))
	return out, nil
}

// str is the first non-empty string, as Helm's coalesce.
func str(vs ...any) string {
	for _, v := range vs {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// merge is sprig's mustMergeOverwrite on values: maps merge key by key,
// anything else from src replaces; a null is no value (Helm drops it).
func merge(dst, src map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(src)) {
		v := src[k]
		if v == nil {
			continue
		}
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
			v = deepCopy(sm)
		}
		dst[k] = v
	}
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sm, ok := v.(map[string]any); ok {
			v = deepCopy(sm)
		}
		out[k] = v
	}
	return out
}

func same(a, b any) bool { return reflect.DeepEqual(a, b) }

// ProfileFacts is a copy of istioProfiles by file name ("ambient",
// "platform-k3s", "compatibility-version-1.28"), for the test that holds
// them to Istio's files.
func ProfileFacts() map[string]map[string]any {
	out := make(map[string]map[string]any, len(istioProfiles))
	for k, v := range istioProfiles {
		out[k] = deepCopy(v)
	}
	return out
}
