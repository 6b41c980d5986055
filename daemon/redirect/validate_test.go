package redirect

import "testing"

// Validate is Build's own check: it accepts what Build accepts and
// refuses with the same error what Build refuses.
func TestValidateAgreesWithBuild(t *testing.T) {
	for name, s := range goldenSpecs() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate refused a spec Build takes: %v", name, err)
		}
	}
	bad := DefaultSpec()
	bad.OutboundPort = 0
	bad.ExcludeInterfaces = []string{"this-name-is-far-too-long"}
	verr := bad.Validate()
	_, berr := Build(bad)
	if verr == nil || berr == nil || verr.Error() != berr.Error() {
		t.Fatalf("Validate: %v; Build: %v; want the same error from both", verr, berr)
	}
}
