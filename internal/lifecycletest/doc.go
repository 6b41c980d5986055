// Package lifecycletest holds the node-lifecycle scenarios
// for any mesh CNI on the test cluster (internal/nodetest): an agent
// outage, a rolling upgrade and a rollback under pod churn, and a node
// reboot with a prober dialling the pods throughout. A Mesh says how the CNI is installed,
// upgraded and rolled back and which pods it captures; test/lifecycle runs
// the scenarios on sluice (its chart) and test/peer on istio-cni (Istio's
// chart). Each scenario fails its test on any pod that ran uncaptured,
// failed for good or was evicted, and records its counts (Count) in the
// file ResultsEnv names, for hack/bench.
package lifecycletest
