// Package istio holds the differential test: sluice's policy against
// Istio's own code (istio-cni's annotation parsing, istio-iptables' rule
// generation, the ambient enablement selectors, and the istio-validation
// checker run in netns programmed by sluice). It is a module of its own so
// the product never depends on Istio; run it with
// `cd test/istio && go test ./...`.
package istio
