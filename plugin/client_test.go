package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// A request larger than the agent takes (a huge prevResult) is a clear
// invalid-config error (7) before anything is sent, never "try again
// later" (11), which would have the runtime retry it for ever.
func TestOversizeRequestIsInvalidConfig(t *testing.T) {
	sock, agent := serveAgent(t)
	var ips []map[string]any
	for i := range 60000 {
		ips = append(ips, map[string]any{"address": fmt.Sprintf("10.%d.%d.%d/32", i>>16, (i>>8)&255, i&255)})
	}
	stdin, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "sluice", "type": "sluice", "socket": sock,
		"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": ips}})
	// A result printed (the bug) goes nowhere rather than fill a pipe.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	saved := os.Stdout
	os.Stdout = null
	err = cmdAdd(&skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u", StdinData: stdin})
	os.Stdout = saved
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(cniErr.Msg, "too large") {
		t.Fatalf("oversize ADD: %#v, want code %d saying it is too large", err, types.ErrInvalidNetworkConfig)
	}
	agent.mu.Lock()
	defer agent.mu.Unlock()
	if len(agent.adds) != 0 {
		t.Fatal("the oversize request reached the agent")
	}
}
