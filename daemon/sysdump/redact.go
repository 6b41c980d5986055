package sysdump

import (
	"bytes"
	"regexp"
	"strings"
)

// Redacted replaces every secret the redactor finds.
const Redacted = "[redacted]"

// secretWords name a value that is a secret, wherever they appear in a key:
// SLUICE_FOO_TOKEN, client-key-data, "password", Authorization.
const secretWords = `token|secret|passw(?:or)?d|pwd|credential|key|authorization|bearer|session`

var (
	secretNameRE = regexp.MustCompile(`(?i)(?:` + secretWords + `)`)
	// A key that names a secret, then ':' or '=', then the value: quoted
	// (JSON, YAML), or bare. After '=' (env, logfmt, flags) a bare value
	// runs to whitespace; after ':' (YAML, HTTP headers) to the line's end,
	// since "password: two words" is one value.
	keyValueRE = regexp.MustCompile(`(?i)(["']?[A-Za-z0-9_.\-]*(?:` + secretWords + `)[A-Za-z0-9_.\-]*["']?[ \t]*)([:=])([ \t]*)("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"'{\[][^\n]*)`)
	// Credentials that need no key to be recognised.
	bearerRE = regexp.MustCompile(`(?i)\b(bearer|basic)([ \t]+)[A-Za-z0-9\-._~+/]+=*`)
	pemRE    = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`)
	jwtRE    = regexp.MustCompile(`eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*`)
	// An HTTP cookie header, whole; a key named cookie alone is not a
	// secret (the journal's netnsCookie is an inode's id).
	cookieRE   = regexp.MustCompile(`(?im)^([ \t]*(?:set-)?cookie:[ \t]*)\S.*$`)
	userinfoRE = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@`)
)

// SecretName reports whether a variable, flag or key of this name holds a
// secret, so its value never enters the archive.
func SecretName(name string) bool { return secretNameRE.MatchString(name) }

// Redact replaces every secret value it recognises and says how many. It
// errs towards hiding: a key named like a secret loses its value even if
// the value is harmless.
func Redact(data []byte) ([]byte, int) {
	n := 0
	count := func(re *regexp.Regexp, repl []byte) {
		data = re.ReplaceAllFunc(data, func(m []byte) []byte {
			n++
			return re.ReplaceAll(m, repl)
		})
	}
	count(pemRE, []byte("-----"+Redacted+" PRIVATE KEY-----"))
	count(jwtRE, []byte(Redacted))
	count(userinfoRE, []byte("${1}"+Redacted+"@"))
	count(cookieRE, []byte("${1}"+Redacted))
	count(bearerRE, []byte("${1}${2}"+Redacted))
	var out bytes.Buffer
	last := 0
	for _, m := range keyValueRE.FindAllSubmatchIndex(data, -1) {
		value := data[m[8]:m[9]]
		if string(value) == Redacted || string(value) == `"`+Redacted+`"` {
			continue
		}
		sep := data[m[4]]
		end := m[9]
		if sep == '=' && value[0] != '"' && value[0] != '\'' {
			// A bare value after '=' ends at whitespace.
			if i := bytes.IndexAny(value, " \t"); i >= 0 {
				end = m[8] + i
			}
		}
		out.Write(data[last:m[8]])
		switch value[0] {
		case '"':
			out.WriteString(`"` + Redacted + `"`)
		case '\'':
			out.WriteString(`'` + Redacted + `'`)
		default:
			out.WriteString(Redacted)
		}
		last = end
		n++
	}
	if n == 0 {
		return data, 0
	}
	out.Write(data[last:])
	return out.Bytes(), n
}

// SecretFile says why a file must not enter the archive at all, or "": a
// kubeconfig, a service-account token, a private key, by name or content.
// Redaction would leave their structure; leaving them out leaves nothing.
func SecretFile(name string, data []byte) string {
	lower := strings.ToLower(name)
	for _, w := range []string{"kubeconfig", "token", "secret", "passw", "credential", ".key", ".pem", "id_rsa", "id_ed25519"} {
		if strings.Contains(lower, w) {
			return "named like a secret (" + w + ")"
		}
	}
	switch {
	case pemRE.Match(data):
		return "holds a private key"
	case jwtRE.Match(data):
		return "holds a token"
	case kubeconfigRE.Match(data) && bytes.Contains(data, []byte("users")):
		return "a kubeconfig"
	}
	return ""
}

var kubeconfigRE = regexp.MustCompile(`(?m)^\s*["']?kind["']?\s*:\s*["']?Config\b`)
