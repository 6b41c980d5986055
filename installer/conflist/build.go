package conflist

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// OwnCNIVersion is the cniVersion of the conflist written in non-chained
// mode: the newest spec libcni and the sluice plugin both implement.
const OwnCNIVersion = "1.1.0"

// conflistDoc is the layout of every conflist this package creates. The
// field order is the order in the file.
type conflistDoc struct {
	CNIVersion string            `json:"cniVersion,omitempty"`
	Name       string            `json:"name"`
	Plugins    []json.RawMessage `json:"plugins"`
}

// FromConf turns a single-plugin .conf into a .conflist of the same
// network (name and cniVersion) with the plugin as its only element. The
// plugin keeps its keys in order, all its fields and the spelling of every
// value; only the whitespace between tokens is re-indented to fit the list.
func FromConf(conf []byte) ([]byte, error) {
	pc, err := libcni.NetworkPluginConfFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("parse single-plugin conf: %w", err)
	}
	if pc.Network.Name == "" {
		return nil, fmt.Errorf("single-plugin conf of type %q has no network name", pc.Network.Type)
	}
	return encodeConflist(conflistDoc{
		CNIVersion: pc.Network.CNIVersion,
		Name:       pc.Network.Name,
		Plugins:    []json.RawMessage{bytes.TrimSpace(conf)},
	})
}

// Own is the whole file written in non-chained mode: a network called
// network whose only plugin is entry.
func Own(network string, entry []byte) ([]byte, error) {
	ent, err := normalizeEntry(entry)
	if err != nil {
		return nil, err
	}
	return encodeConflist(conflistDoc{CNIVersion: OwnCNIVersion, Name: network, Plugins: []json.RawMessage{ent}})
}

// Entry builds our plugin object: "type" first, then cfg's keys in sorted
// order, so the same cfg always gives the same bytes.
func Entry(cfg map[string]any) ([]byte, error) {
	if t, ok := cfg["type"]; ok && t != PluginType {
		return nil, fmt.Errorf("plugin config sets type %v; the entry's type is always %q", t, PluginType)
	}
	rest := make(map[string]any, len(cfg))
	for k, v := range cfg {
		if k != "type" {
			rest[k] = v
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rest); err != nil {
		return nil, fmt.Errorf("encode sluice plugin config: %w", err)
	}
	body := bytes.TrimSpace(b.Bytes()) // "{...}" with sorted keys
	out := []byte(`{"type":"` + PluginType + `"`)
	if len(body) > 2 {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}

func encodeConflist(doc conflistDoc) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode conflist %q: %w", doc.Name, err)
	}
	if err := validate(b.Bytes(), false); err != nil {
		return nil, fmt.Errorf("conflist %q built from conf: %w", doc.Name, err)
	}
	return b.Bytes(), nil
}
