// Package conflist edits CNI network configuration lists as bytes: it
// inserts and removes the sluice plugin entry and converts single-plugin
// configs, without re-encoding anything it does not own. Every function is
// pure; the installer package does the file work.
package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// PluginType is the CNI "type" of our entry, and the name of the binary.
const PluginType = "sluice"

// ErrOnlyPlugin is returned by RemoveEntry when our entry is the only plugin
// of the list: removing it would leave a conflist that no runtime accepts.
var ErrOnlyPlugin = errors.New("the sluice entry is the only plugin of the list")

// InsertEntry returns conflist with entry as its last plugin. Every earlier
// sluice entry, wherever it was, is removed first, so a second call with the
// same entry returns its input byte for byte and the installer does not write.
//
// The file is edited in place rather than decoded and re-encoded: the bytes
// of every other plugin (key order, unknown fields, number spelling) and
// everything around the plugins array stay exactly as they were. The entry
// is indented to match the list's existing layout. The result is checked
// with libcni, as the runtime will read it, before it is returned.
func InsertEntry(conflist, entry []byte) ([]byte, error) {
	ent, err := normalizeEntry(entry)
	if err != nil {
		return nil, err
	}
	base, err := removeType(conflist, PluginType)
	if err != nil {
		return nil, err
	}
	l, err := locatePlugins(base)
	if err != nil {
		return nil, err
	}

	// The new entry is separated from the last plugin by the same bytes
	// that separate the plugins already there, so RemoveEntry can cut
	// exactly what was added and get the original file back. An empty
	// list (all its plugins were ours) is laid out afresh.
	var sep, tail []byte
	from, to := l.open+1, l.close
	unit := indentUnit(base)
	switch n := len(l.plugins); {
	case n >= 2:
		sep = base[l.plugins[n-2].end:l.plugins[n-1].start]
		from, to = l.plugins[n-1].end, l.plugins[n-1].end
	case n == 1:
		sep = append([]byte{','}, base[l.open+1:l.plugins[0].start]...)
		from, to = l.plugins[0].end, l.plugins[0].end
	case bytes.IndexByte(base[l.open:l.close], '\n') >= 0:
		ind := lineIndent(base, l.open)
		sep, tail = []byte("\n"+ind+unit), []byte("\n"+ind)
	}

	formatted := ent
	if i := bytes.LastIndexByte(sep, '\n'); i >= 0 {
		var b bytes.Buffer
		if err := json.Indent(&b, ent, string(sep[i+1:]), unit); err != nil {
			return nil, fmt.Errorf("indent sluice entry: %w", err)
		}
		formatted = b.Bytes()
	}

	out := make([]byte, 0, len(base)+len(sep)+len(formatted)+len(tail))
	out = append(out, base[:from]...)
	out = append(out, sep...)
	out = append(out, formatted...)
	out = append(out, tail...)
	out = append(out, base[to:]...)
	if err := validate(out, true); err != nil {
		return nil, fmt.Errorf("conflist with sluice entry inserted: %w", err)
	}
	return out, nil
}

// RemoveEntry returns conflist without any sluice entry, leaving every other
// byte as it was. It is the exact inverse of InsertEntry on a list that had
// no sluice entry. A list without our entry is returned unchanged.
func RemoveEntry(conflist []byte) ([]byte, error) {
	out, err := RemovePlugins(conflist, PluginType)
	if errors.Is(err, errEmptied) {
		return nil, ErrOnlyPlugin
	}
	return out, err
}

// errEmptied: removing the plugins would leave none.
var errEmptied = errors.New("no plugin would be left")

// RemovePlugins returns conflist without any plugin of type typ, every
// other byte as it was; a list without one is returned unchanged. It
// refuses to leave a list with no plugins, which no runtime accepts.
func RemovePlugins(conflist []byte, typ string) ([]byte, error) {
	out, err := removeType(conflist, typ)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(out, conflist) {
		return conflist, nil
	}
	l, err := locatePlugins(out)
	if err != nil {
		return nil, err
	}
	if len(l.plugins) == 0 {
		return nil, fmt.Errorf("remove %q plugins: %w", typ, errEmptied)
	}
	if err := validate(out, false); err != nil {
		return nil, fmt.Errorf("conflist with %q plugins removed: %w", typ, err)
	}
	return out, nil
}

// PluginTypes lists the plugin types of conflist in order; used to tell an
// operator which CNI rewrote a file.
func PluginTypes(conflist []byte) ([]string, error) {
	l, err := locatePlugins(conflist)
	if err != nil {
		return nil, err
	}
	types := make([]string, len(l.plugins))
	for i, p := range l.plugins {
		types[i] = p.typ
	}
	return types, nil
}

// removeType cuts every plugin of type typ, one at a time from the last,
// and re-locates after each cut so offsets never go stale.
func removeType(data []byte, typ string) ([]byte, error) {
	for {
		l, err := locatePlugins(data)
		if err != nil {
			return nil, err
		}
		i := l.lastOf(typ)
		if i < 0 {
			return data, nil
		}
		// Cut the element with the separator before it, or after it when
		// it is first, so the remaining layout is what it was before the
		// element was added.
		from, to := l.plugins[i].start, l.plugins[i].end
		switch {
		case i > 0:
			from = l.plugins[i-1].end
		case len(l.plugins) > 1:
			to = l.plugins[1].start
		}
		data = append(append([]byte{}, data[:from]...), data[to:]...)
	}
}

// normalizeEntry checks that entry is a plugin object of our type and
// compacts it, so its layout in the file depends only on the file.
func normalizeEntry(entry []byte) ([]byte, error) {
	pc, err := libcni.NetworkPluginConfFromBytes(entry)
	if err != nil {
		return nil, fmt.Errorf("parse sluice entry: %w", err)
	}
	if pc.Network.Type != PluginType {
		return nil, fmt.Errorf("sluice entry has type %q, want %q", pc.Network.Type, PluginType)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, entry); err != nil {
		return nil, fmt.Errorf("compact sluice entry: %w", err)
	}
	return b.Bytes(), nil
}

// indentUnit guesses one level of indentation from the whitespace before
// the list's first key; two spaces when the file gives no hint.
func indentUnit(data []byte) string {
	open := bytes.IndexByte(data, '{')
	rest := data[open+1:]
	ws := rest[:len(rest)-len(bytes.TrimLeft(rest, " \t\r\n"))]
	if i := bytes.LastIndexByte(ws, '\n'); i >= 0 && i+1 < len(ws) {
		return string(ws[i+1:])
	}
	return "  "
}

// lineIndent is the whitespace that starts the line holding data[at].
func lineIndent(data []byte, at int) string {
	line := data[bytes.LastIndexByte(data[:at], '\n')+1 : at]
	return string(line[:len(line)-len(bytes.TrimLeft(line, " \t"))])
}

// Validate parses data as the runtime will and requires at least one
// plugin.
func Validate(data []byte) error {
	return validate(data, false)
}

// validate is Validate; with wantLast set, the last plugin must be ours.
func validate(data []byte, wantLast bool) error {
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		return err
	}
	if len(list.Plugins) == 0 {
		return errors.New("no plugins in list")
	}
	if last := list.Plugins[len(list.Plugins)-1].Network.Type; wantLast && last != PluginType {
		return fmt.Errorf("last plugin has type %q, want %q", last, PluginType)
	}
	return nil
}

// pluginSpan is one element of the plugins array: its exact bytes are
// data[start:end].
type pluginSpan struct {
	start, end int
	typ        string
}

// plugins is where the plugins array sits in a conflist's bytes.
type plugins struct {
	open    int // offset of '['
	close   int // offset of ']'
	plugins []pluginSpan
}

func (l plugins) lastOf(typ string) int {
	for i := len(l.plugins) - 1; i >= 0; i-- {
		if l.plugins[i].typ == typ {
			return i
		}
	}
	return -1
}

// locatePlugins finds the byte offsets of the top-level "plugins" array and
// of each of its elements, without re-encoding anything.
func locatePlugins(data []byte) (plugins, error) {
	var l plugins
	if !json.Valid(data) {
		return l, errors.New("conflist is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return l, errors.New("conflist is not a JSON object")
	}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return l, fmt.Errorf("read conflist key: %w", err)
		}
		if key, _ := tok.(string); key != "plugins" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return l, fmt.Errorf("read conflist key %q: %w", key, err)
			}
			continue
		}
		// libcni reads the last of duplicate keys; editing one of two
		// arrays would be a guess, so refuse instead.
		if found {
			return l, errors.New(`conflist has more than one "plugins" key`)
		}
		found = true
		if err := l.readArray(dec); err != nil {
			return l, err
		}
	}
	if !found {
		return l, errors.New(`conflist has no "plugins" array`)
	}
	return l, nil
}

func (l *plugins) readArray(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("read plugins: %w", err)
	}
	if tok != json.Delim('[') {
		return errors.New(`conflist "plugins" is not an array`)
	}
	l.open = int(dec.InputOffset()) - 1
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("read plugin %d: %w", i, err)
		}
		var p struct {
			Type string `json:"type"`
		}
		if !strings.HasPrefix(string(raw), "{") {
			return fmt.Errorf("plugin %d is not a JSON object", i)
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("read type of plugin %d: %w", i, err)
		}
		end := int(dec.InputOffset())
		l.plugins = append(l.plugins, pluginSpan{start: end - len(raw), end: end, typ: p.Type})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("read end of plugins: %w", err)
	}
	l.close = int(dec.InputOffset()) - 1
	return nil
}
