// Package lifecycletest holds the node-lifecycle scenarios
// for any mesh CNI on the test cluster (test/harness/nodetest): an agent
// outage, a rolling upgrade and a rollback under pod churn, and a node
// reboot with a prober dialling the pods throughout. A Mesh says how the CNI is installed,
// upgraded and rolled back and which pods it captures; test/lifecycle runs
// the scenarios on sluice (its chart) and test/peer on istio-cni (Istio's
// chart). Each scenario fails its test on any pod that ran uncaptured,
// failed for good or was evicted, and records its counts (Count) in the
// file ResultsEnv names, for hack/bench.
//
// The outage (Outage) replaces the first node's agent pod with one whose
// image is absent, under OnDelete and on that node only (DaemonSetOutage:
// a rolling update could take the other node's agent first and stall),
// for 20 s while both nodes churn; the churn pods tolerate a not-ready
// node for 5 s, so a node the outage took down shows evictions. A
// scenario's disruption starts only once its baseline's pods have started
// (settle). Churn is 2 pods/s over two nodes for hack/bench, half that
// under make test, each pod pinned by a hostname node selector so it goes
// through the scheduler. istio-cni's upgrade is the same build under a
// second tag (nodetest.Cluster.TagImage), rolled back with helm rollback;
// its pods that fail for good are counted (Mesh.FailedTolerated), since
// its old agent takes its entry out on SIGTERM and istio-validation then
// refuses a pod made in the gap. A pod that never started counts in the
// start delays as Never, after every pod that started. Results is one
// JSON file, a row per CNI and scenario, each scenario replacing its own
// row, so both suites fill it side by side.
package lifecycletest
