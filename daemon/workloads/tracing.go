package workloads

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracer is the global provider's: an enrolment is a step of the CNI
// call's trace when the call's ctx carries one (daemon/rpc), and records
// nothing otherwise.
var tracer = otel.Tracer("github.com/sluicemesh/sluice/daemon/workloads")

// endSpan ends a step's span, marked failed with err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
