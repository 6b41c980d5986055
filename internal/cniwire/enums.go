package cniwire

import "strconv"

// The CNI service's full method names, as gRPC puts them in :path.
const (
	CNI_Add_FullMethodName    = "/sluice.v1.CNI/Add"
	CNI_Del_FullMethodName    = "/sluice.v1.CNI/Del"
	CNI_Check_FullMethodName  = "/sluice.v1.CNI/Check"
	CNI_Status_FullMethodName = "/sluice.v1.CNI/Status"
	CNI_GC_FullMethodName     = "/sluice.v1.CNI/GC"
)

// ApiVersion numbers the wire contract, not the release.
type ApiVersion int32

const (
	ApiVersion_API_VERSION_UNSPECIFIED ApiVersion = 0
	ApiVersion_API_VERSION_1           ApiVersion = 1
	// Adds the plugin's warnings to Add, Del and Check requests.
	ApiVersion_API_VERSION_2 ApiVersion = 2
)

var apiVersionNames = []string{"API_VERSION_UNSPECIFIED", "API_VERSION_1", "API_VERSION_2"}

// String is the value's name in agent.proto, or its number when it has none
// (as protobuf-go prints an enum value newer than its descriptor).
func (x ApiVersion) String() string { return enumString(int32(x), apiVersionNames) }

// Mode is how a workload's traffic is captured.
type Mode int32

const (
	Mode_MODE_UNSPECIFIED Mode = 0
	// Envoy sidecar in the pod: outbound to 15001, inbound to 15006.
	Mode_MODE_SIDECAR Mode = 1
	// ztunnel in-pod redirection (Istio ambient).
	Mode_MODE_AMBIENT Mode = 2
)

var modeNames = []string{"MODE_UNSPECIFIED", "MODE_SIDECAR", "MODE_AMBIENT"}

// String is the value's name in agent.proto, or its number when it has none
// (an agent newer than the plugin may answer with a mode it does not know).
func (x Mode) String() string { return enumString(int32(x), modeNames) }

// enumString names n from names, indexed by number (both enums number their
// values 0, 1, 2, ...; the tests check that against the descriptors).
func enumString(n int32, names []string) string {
	if n >= 0 && int(n) < len(names) {
		return names[n]
	}
	return strconv.Itoa(int(n))
}
