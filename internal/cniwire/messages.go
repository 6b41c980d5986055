package cniwire

// PodRef identifies the pod from the runtime's CNI_ARGS
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID). Empty outside Kubernetes.
type PodRef struct {
	Namespace string
	Name      string
	Uid       string
}

// IPConfig is one address from the previous plugin's result.
type IPConfig struct {
	// CIDR notation; a bare address is taken as a host prefix by the agent.
	Address   string
	Gateway   string
	Interface string
}

// PluginConfig is the sluice entry of the conflist as the runtime passed it.
type PluginConfig struct {
	CniVersion  string
	NetworkName string
	// The plugin's own entry as JSON, without prevResult.
	Raw []byte
}

// Attachment names one CNI attachment, as in the spec's GC.
type Attachment struct {
	ContainerId string
	IfName      string
}

type AddRequest struct {
	ApiVersion  ApiVersion
	ContainerId string
	Netns       string
	IfName      string
	Pod         *PodRef
	Ips         []*IPConfig
	Config      *PluginConfig
	RequestId   string
	Warnings    []string
}

type AddResponse struct {
	// True when a ruleset was programmed; false when the pod was passed through.
	Enrolled bool
	Mode     Mode
	// Why the pod was passed through, or a note on what was done.
	Reason string
}

type DelRequest struct {
	ApiVersion  ApiVersion
	ContainerId string
	// May be empty: the runtime may DEL after the netns is gone.
	Netns     string
	IfName    string
	Pod       *PodRef
	Config    *PluginConfig
	RequestId string
	Warnings  []string
}

type DelResponse struct{}

// CheckRequest has AddRequest's fields, numbers included (agent.proto);
// the completeness test holds each to its own descriptor.
type CheckRequest AddRequest

type CheckResponse struct {
	// Empty when the kernel matches; otherwise what differs, one item a difference.
	Drift []string
}

type StatusRequest struct {
	ApiVersion ApiVersion
	Config     *PluginConfig
	RequestId  string
}

type StatusResponse struct {
	Ready bool
	// Why the agent is not ready.
	Reason string
}

type GCRequest struct {
	ApiVersion ApiVersion
	// cni.dev/valid-attachments: everything else of this network is stale.
	ValidAttachments []*Attachment
	Config           *PluginConfig
	RequestId        string
	// True when the runtime's config carried cni.dev/valid-attachments, even
	// as an empty list (the agent refuses a GC without the key).
	ValidAttachmentsPresent bool
}

type GCResponse struct {
	// The attachments whose state was removed.
	Removed []*Attachment
}
