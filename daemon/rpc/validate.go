package rpc

import (
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The agent serves its own API version and the one before it, so a node
// can upgrade the agent and the plugin in either order.
const (
	apiVersion    = sluicev1.ApiVersion_API_VERSION_2
	minAPIVersion = sluicev1.ApiVersion_API_VERSION_1
)

func checkAPIVersion(v sluicev1.ApiVersion) error {
	if v < minAPIVersion || v > apiVersion {
		return fmt.Errorf("api_version %d is not served: this agent serves %d through %d; upgrade the older of plugin and agent", v, minAPIVersion, apiVersion)
	}
	return nil
}

// maxContainerID keeps the journal's file names within the file-name limit
// (255 bytes): <id>:<if_name, up to 15>.json, and .corrupt appended when a
// record is moved aside. Runtimes use 64 hex digits.
const maxContainerID = 255 - len(":") - 15 - len(".json") - len(".corrupt")

// checkContainerID applies the CNI spec: alphanumerics, '_', '.', '-',
// starting with an alphanumeric. It also keeps journal file names safe.
func checkContainerID(id string) error {
	if id == "" {
		return fmt.Errorf("container_id is empty")
	}
	if len(id) > maxContainerID {
		return fmt.Errorf("container_id is %d bytes, longer than %d", len(id), maxContainerID)
	}
	for i, c := range id {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("_.-", c)) {
			return fmt.Errorf("container_id %q: character %q at %d is not allowed", id, c, i)
		}
	}
	return nil
}

// checkIfName applies the kernel's and the CNI spec's interface name rules.
func checkIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("if_name is empty")
	case len(name) > 15:
		return fmt.Errorf("if_name %q is longer than 15 bytes", name)
	case name == "." || name == "..":
		return fmt.Errorf("if_name %q is not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return fmt.Errorf("if_name %q contains '/', ':' or whitespace", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		// The kernel takes a C string: a NUL would cut the name short.
		return fmt.Errorf("if_name %q contains a control character", name)
	}
	return nil
}

func checkAttachment(containerID, ifName string) (workloads.Attachment, error) {
	if err := checkContainerID(containerID); err != nil {
		return workloads.Attachment{}, err
	}
	if err := checkIfName(ifName); err != nil {
		return workloads.Attachment{}, err
	}
	return workloads.Attachment{ContainerID: containerID, IfName: ifName}, nil
}

// parseIPs parses the addresses the caller gave, once: a CNI result's
// prefixes ("10.1.0.2/24") or bare addresses (NRI gives those), each kept
// as a prefix. One that parses as neither refuses the call, naming it: left
// out, the pod would lose its family's capture decision and, in ambient
// mode, its kubelet probes' exemption.
// checkRequest is what ADD and CHECK check before anything else, as gRPC
// statuses: the wire version, the attachment, and the IPs, parsed once
// here. requestID, when set, names the call in an IP refusal (ADD's).
func checkRequest(v sluicev1.ApiVersion, containerID, ifName string, ips []*sluicev1.IPConfig, requestID string) (workloads.Attachment, []netip.Prefix, error) {
	if err := checkAPIVersion(v); err != nil {
		return workloads.Attachment{}, nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	a, err := checkAttachment(containerID, ifName)
	if err != nil {
		return workloads.Attachment{}, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	parsed, err := parseIPs(ips)
	if err != nil {
		return workloads.Attachment{}, nil, withRequestID(status.Error(codes.InvalidArgument, err.Error()), requestID)
	}
	return a, parsed, nil
}

func parseIPs(ips []*sluicev1.IPConfig) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, ip := range ips {
		p, err := workloads.ParseIP(ip.GetAddress())
		if err != nil {
			return nil, fmt.Errorf("ips[%d].address: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}
