// Package admission reads the API server's answers to the agent's fence
// probes: the dry runs by which nodetaint and nodecondition learn whether
// the chart's ValidatingAdmissionPolicy that limits the agent to its own
// node is in force.
package admission

import (
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DeniedBy reports whether err is a ValidatingAdmissionPolicy refusing a
// request with the given message. An RBAC refusal, a webhook's, or another
// policy's (which need not limit the agent to its own node) is not.
func DeniedBy(err error, message string) bool {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		return false
	}
	msg := s.Status().Message
	return strings.Contains(msg, "ValidatingAdmissionPolicy ") && strings.Contains(msg, "denied request: "+message)
}
