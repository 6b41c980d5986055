package istiovalues

import (
	"fmt"
	"io"
	"os"
)

// Command is `sluice-agent migrate-values FILE|-`: an istio-cni
// values file in, the sluice chart's values out, with a comment for every
// value that has no equivalent. Exit 2 for a usage error, 1 for a file
// that cannot be read.
func Command(args []string, stdin io.Reader, out, errOut io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(errOut, "usage: sluice-agent migrate-values FILE|-\n  an istio-cni values file (the istio-cni chart's, or Istio's with a cni: section) as the sluice chart's values, on stdout")
		if len(args) == 1 {
			return 0
		}
		return 2
	}
	var in []byte
	var err error
	if args[0] == "-" {
		in, err = io.ReadAll(stdin)
	} else {
		in, err = os.ReadFile(args[0])
	}
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent migrate-values: %v\n", err)
		return 1
	}
	res, err := Convert(in)
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent migrate-values: %s: %v\n", args[0], err)
		return 1
	}
	_, _ = out.Write(res.Document(args[0]))
	return 0
}
