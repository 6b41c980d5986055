package main

import "github.com/sluicemesh/sluice/test/harness/lifecycletest"

// The node suites' counts, as test/harness/lifecycletest records them.
type (
	lifecycleRows  = lifecycletest.Results
	lifecycleCount = lifecycletest.Count
)

const (
	lifecycleResultsEnv = lifecycletest.ResultsEnv
	cniSluice           = lifecycletest.CNISluice
	cniIstio            = lifecycletest.CNIIstioCNI
)

// The node-lifecycle scenarios, in the table's order. A scenario no suite
// records shows as not recorded, and the goal cannot be met without it.
var scenarioNames = []string{lifecycletest.ScenarioOutage, lifecycletest.ScenarioUpgrade, lifecycletest.ScenarioRollback, lifecycletest.ScenarioReboot,
	lifecycletest.ScenarioRebootRace}

func loadLifecycleRows(file string) (lifecycleRows, error) { return lifecycletest.LoadResults(file) }
