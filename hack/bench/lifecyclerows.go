package main

import "github.com/sluicemesh/sluice/internal/lifecycletest"

// The node suites' counts, as internal/lifecycletest records them.
type (
	lifecycleRows  = lifecycletest.Results
	lifecycleCount = lifecycletest.Count
)

const (
	lifecycleResultsEnv = lifecycletest.ResultsEnv
	cniSluice           = lifecycletest.CNISluice
	cniIstio            = lifecycletest.CNIIstioCNI
)

// scenarioOutage is the agent outage, which the scenarios package
// does not record yet: its rows show as not recorded until it does.
const scenarioOutage = "outage"

// The node-lifecycle scenarios, in the table's order. A scenario no suite
// records shows as not recorded, and the goal cannot be met without it.
var scenarioNames = []string{scenarioOutage, lifecycletest.ScenarioUpgrade, lifecycletest.ScenarioRollback, lifecycletest.ScenarioReboot}

func loadLifecycleRows(file string) (lifecycleRows, error) { return lifecycletest.LoadResults(file) }
