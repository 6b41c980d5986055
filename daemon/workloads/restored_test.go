package workloads

import (
	"slices"
	"testing"
)

// A drift report names what was lost; each kind counts once a reassert.
func TestDriftKinds(t *testing.T) {
	for _, c := range []struct {
		drift []string
		want  []string
	}{
		{[]string{"table inet sluice is missing"}, []string{RestoredRuleset}},
		{[]string{"table inet sluice: a rule was changed", "chain output is missing"}, []string{RestoredRuleset}},
		{[]string{"ip -4 rule fwmark 0x539/0xfff lookup 100 pref 32764 is missing",
			"ip -4 route local 0.0.0.0/0 dev lo table 100 is missing"}, []string{RestoredRoutes}},
		{[]string{"route 10.0.0.0/8 is not part of the ruleset"}, []string{RestoredRoutes}},
		{[]string{"address fd00::1/128 on lo is missing", "table inet sluice is missing"}, []string{RestoredAddresses, RestoredRuleset}},
		{nil, nil},
	} {
		if got := driftKinds(c.drift); !slices.Equal(got, c.want) {
			t.Errorf("driftKinds(%q) = %v, want %v", c.drift, got, c.want)
		}
	}
}

// Every kind is there from the start, at zero.
func TestRestoredStartsAtZero(t *testing.T) {
	var s Store
	got := s.Restored()
	if len(got) != len(RestoredKinds) {
		t.Fatalf("Restored() = %v, want every kind", got)
	}
	s.restored.add(RestoredHostTable, RestoredHostTable)
	if got := s.Restored(); got[RestoredHostTable] != 2 || got[RestoredRuleset] != 0 {
		t.Errorf("after two host-table restores: %v", got)
	}
}
