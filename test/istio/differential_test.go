package istio

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	istiolog "istio.io/istio/pkg/log"
)

// compatDoc lists the differences sluice keeps on purpose, each with its
// reason; the test fails on any other, and on a listed one that is gone.
const compatDoc = "../../docs/istio-compatibility.md"

func TestMain(m *testing.M) {
	for _, s := range istiolog.Scopes() {
		s.SetOutputLevel(istiolog.NoneLevel)
	}
	os.Exit(m.Run())
}

// knownDifferences reads the rows "| `case` | aspects | reason |" of the
// doc's differential-test table.
func knownDifferences(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(compatDoc)
	if err != nil {
		t.Fatalf("the differences sluice keeps are listed in %s: %v", compatDoc, err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\|\\s*`([a-z0-9-]+)`\\s*\\|([^|]*)\\|\\s*([^|]*\\S)\\s*\\|")
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = strings.Join(strings.Fields(strings.NewReplacer("`", "", ",", " ").Replace(m[2])), ",")
		}
	}
	return out
}

// TestSidecarParity runs every corpus pod through istio-cni and
// istio-iptables and through sluice's policy and builder, and prints what
// each makes of it.
func TestSidecarParity(t *testing.T) {
	known := knownDifferences(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-38s | %-58s | %s\n", "case", "Istio", "sluice")
	seen := map[string]bool{}
	for _, c := range sidecarCorpus {
		seen[c.name] = true
		istio := failed()
		v4, v6, _, ierr := istioRules(c.pod(), c.ips)
		if ierr == nil {
			istio = istioFacts(v4, v6)
		}
		sluice, _, serr := sluiceFacts(c.pod(), c.ips)
		d := diff(istio, sluice)
		verdict := "same"
		if len(d) > 0 {
			verdict = "DIFFERS in " + strings.Join(d, ",")
		}
		fmt.Fprintf(&table, "%-38s | %-58s | %s   [%s]\n", c.name, summary(istio, d, ierr), summary(sluice, d, serr), verdict)
		want, listed := known[c.name]
		switch {
		case len(d) > 0 && !listed:
			t.Errorf("%s: sluice differs from Istio in %v and %s does not list it:\n  istio:  %v (%v)\n  sluice: %v (%v)",
				c.name, d, compatDoc, istio, ierr, sluice, serr)
		case len(d) > 0 && want != strings.Join(d, ","):
			t.Errorf("%s: differs in %v, but %s lists %q", c.name, d, compatDoc, want)
		case len(d) == 0 && listed:
			t.Errorf("%s: %s lists a difference (%s), but sluice now matches Istio: remove the row", c.name, compatDoc, want)
		}
	}
	for name := range known {
		if strings.HasPrefix(name, "traffic-") {
			name = strings.TrimPrefix(name, "traffic-") // TestTrafficParity's rows name corpus cases too
		} else if strings.HasPrefix(name, "ambient-") || strings.HasPrefix(name, "selector-") || strings.HasPrefix(name, "nft-") {
			continue // other tests' rows (nft-: nftExceptionsListed checks them)
		}
		if !seen[name] {
			t.Errorf("%s lists case %q, which the corpus does not have", compatDoc, name)
		}
	}
	t.Log(table.String())
}

// summary is the few aspects a reader needs, and every differing one.
func summary(f facts, differing []string, err error) string {
	if f["result"] != "capture" {
		if err != nil {
			return f["result"] + ": " + shorten(err.Error(), 50)
		}
		return f["result"]
	}
	parts := []string{"in " + f["inbound"], "out " + f["outbound-v4"]}
	for _, k := range differing {
		if k != "inbound" && k != "outbound-v4" {
			parts = append(parts, k+" "+f[k])
		}
	}
	return strings.Join(parts, "; ")
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
