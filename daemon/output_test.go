package main

import (
	"io"
	"strings"
	"testing"
)

// What a person reads comes out the same every run: no map order.

func TestCheckConfigErrorsInFlagOrder(t *testing.T) {
	args := []string{"--state-dir", "s", "--host-proc", "p", "--cni-conf-dir", "c", "--ztunnel-socket", "z",
		"--netns-roots", "n", "--cni-bin-dir", "b", "--plugin-binary", "x", "--host-netns", "h"}
	var first string
	for range 20 {
		_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
		if err == nil {
			t.Fatal("relative paths accepted")
		}
		if first == "" {
			first = err.Error()
			continue
		}
		if err.Error() != first {
			t.Fatalf("--check-config errors changed between runs:\n%s\n---\n%s", first, err)
		}
	}
	last := -1
	for _, flag := range []string{"--state-dir", "--host-proc", "--cni-conf-dir", "--ztunnel-socket", "--netns-roots", "--cni-bin-dir", "--plugin-binary", "--host-netns"} {
		i := strings.Index(first, flag+" ")
		if i < 0 {
			i = strings.Index(first, flag+":")
		}
		if i <= last {
			t.Fatalf("%s missing or out of order in:\n%s", flag, first)
		}
		last = i
	}
}
