// Command testapp is the one binary of the node tests' test-app image. It
// plays these parts, chosen by its first argument:
//
//	testapp proxy PORT...    a stand-in for istio-proxy: on each port, every
//	                         connection is answered and logged with its
//	                         original destination
//	testapp forward-proxy OUT IN
//	                         a stand-in for a sidecar passing traffic on in
//	                         plain text: OUT to the original destination,
//	                         IN to the app on localhost
//	testapp app PORT DIAL    an application: serves PORT (answering "app")
//	                         and keeps dialling DIAL, logging each reply
//	testapp ztunnel SOCKET   a stand-in for ztunnel: takes pods over ZDS and
//	                         runs the proxy part inside each pod's netns
//	testapp validate         the istio-validation init container's place:
//	                         says so and exits 0
//
// Its log lines on stdout are what the tests read back with the pod's logs.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp proxy PORT... | app PORT DIAL | ztunnel SOCKET")
		os.Exit(2)
	}
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "proxy":
		err = runProxy(args)
	case "forward-proxy":
		err = runForwardProxy(args)
	case "app":
		err = runApp(args)
	case "ztunnel":
		err = runZtunnel(args)
	case "validate":
		fmt.Println("istio-validation stand-in: nothing to check")
	default:
		err = fmt.Errorf("unknown part %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}
